"""LabelSmoothedCrossEntropy against a numpy reference with explicit smoothed targets."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.errors import ConfigError
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from tests.helpers import TestCase


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def reference_per_token(y_true, logits, epsilon):
    vocab = logits.shape[-1]
    targets = np.full(logits.shape, epsilon / (vocab - 1))
    np.put_along_axis(targets, y_true[..., None], 1.0 - epsilon, axis=-1)
    return -(targets * log_softmax(logits.astype(np.float64))).sum(axis=-1)


class LabelSmoothedCrossEntropyTest(TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        self.y_true = np.array([[5, 2, 3, 0, 0], [1, 4, 6, 2, 0], [3, 0, 0, 0, 0]], "int32")
        self.logits = rng.normal(size=(3, 5, 7)).astype("float32") * 3
        self.mask = (self.y_true != 0).astype("float64")

    def test_matches_numpy_reference(self):
        per_token = reference_per_token(self.y_true, self.logits, 0.1)
        loss = LabelSmoothedCrossEntropy(epsilon=0.1)
        self.assertAllClose(loss.call(self.y_true, self.logits), per_token, rtol=1e-5)
        expected = (per_token * self.mask).sum() / self.mask.sum()
        self.assertAllClose(loss(self.y_true, self.logits), expected, rtol=1e-5)

    def test_per_token_shape(self):
        self.assertEqual(tuple(LabelSmoothedCrossEntropy().call(self.y_true, self.logits).shape), (3, 5))

    def test_epsilon_zero_is_sparse_cross_entropy(self):
        sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        expected = sparse(self.y_true, self.logits)
        self.assertAllClose(LabelSmoothedCrossEntropy(epsilon=0.0).call(self.y_true, self.logits), expected, rtol=1e-5)

    def test_padding_is_ignored(self):
        loss = LabelSmoothedCrossEntropy(epsilon=0.1)
        changed = self.logits.copy()
        changed[self.y_true == 0] = 100.0 * np.random.default_rng(1).normal(size=changed[self.y_true == 0].shape)
        self.assertAllClose(loss(self.y_true, changed), loss(self.y_true, self.logits), rtol=1e-6)
        # The same holds with sample weights, which multiply the padding mask.
        weights = np.array([[1, 2, 1, 5, 5], [1, 1, 1, 1, 9], [3, 9, 9, 9, 9]], "float32")
        per_token = reference_per_token(self.y_true, self.logits, 0.1)
        expected = (per_token * weights * self.mask).sum() / (weights * self.mask).sum()
        self.assertAllClose(loss(self.y_true, changed, sample_weight=weights), expected, rtol=1e-5)

    def test_per_sequence_sample_weight(self):
        loss = LabelSmoothedCrossEntropy(epsilon=0.1)
        per_token = reference_per_token(self.y_true, self.logits, 0.1)
        weights = np.array([1.0, 0.0, 2.0])[:, None] * self.mask
        expected = (per_token * weights).sum() / weights.sum()
        got = loss(self.y_true, self.logits, sample_weight=np.array([1.0, 0.0, 2.0], "float32"))
        self.assertAllClose(got, expected, rtol=1e-5)

    def test_sum_over_batch_size_counts_padding_positions(self):
        loss = LabelSmoothedCrossEntropy(epsilon=0.1, reduction="sum_over_batch_size")
        per_token = reference_per_token(self.y_true, self.logits, 0.1)
        self.assertAllClose(loss(self.y_true, self.logits), (per_token * self.mask).sum() / self.mask.size, rtol=1e-5)

    def test_normalize_subtracts_target_entropy(self):
        epsilon, vocab = 0.1, 7
        targets = np.full((1, 1, vocab), epsilon / (vocab - 1))
        targets[0, 0, 4] = 1 - epsilon
        y_true = np.array([[4]], "int32")
        logits = np.log(targets).astype("float32")  # predicts the smoothed target exactly
        self.assertAllClose(LabelSmoothedCrossEntropy(epsilon, normalize=True)(y_true, logits), 0.0, atol=1e-6)
        entropy = -(targets * np.log(targets)).sum()
        self.assertAllClose(LabelSmoothedCrossEntropy(epsilon)(y_true, logits), entropy, rtol=1e-5)

    def test_low_precision_logits_are_computed_in_float32(self):
        loss = LabelSmoothedCrossEntropy(epsilon=0.1)
        for dtype in ("float16", "bfloat16"):
            logits = tf.cast(self.logits, dtype)
            reference = loss(self.y_true, tf.cast(logits, "float32"))
            got = loss(self.y_true, logits)
            self.assertEqual(got.dtype, tf.float32)
            self.assertEqual(loss.call(self.y_true, logits).dtype, tf.float32)
            self.assertAllClose(got, reference, rtol=1e-6)

    def test_gradient_is_finite(self):
        loss = LabelSmoothedCrossEntropy(epsilon=0.1)
        for dtype in ("float32", "float16"):
            logits = tf.Variable(tf.cast(self.logits * 1e3, dtype))  # saturated softmax
            with tf.GradientTape() as tape:
                value = loss(self.y_true, logits)
            gradient = tape.gradient(value, logits)
            self.assertTrue(np.isfinite(value.numpy()))
            self.assertTrue(np.all(np.isfinite(tf.cast(gradient, "float32").numpy())))
            padded = tf.cast(gradient, "float32").numpy()[self.y_true == 0]
            self.assertAllEqual(padded, np.zeros((7, 7)))  # 7 padded positions, no gradient

    def test_gradient_equals_that_of_the_log_softmax_formula(self):
        """The fused op's own gradient is the autodiff gradient of -Σ_k q_k log p_k, eagerly and under XLA."""
        def reference(y_true, logits, epsilon, weights):
            log_probs = tf.nn.log_softmax(tf.cast(logits, "float32"))
            off = epsilon / (logits.shape[-1] - 1)
            targets = tf.one_hot(y_true, logits.shape[-1]) * (1.0 - epsilon - off) + off
            per_token = -tf.reduce_sum(targets * log_probs, axis=-1)
            return tf.reduce_sum(per_token * weights) / tf.reduce_sum(weights)

        def gradients(function, logits, *args):
            with tf.GradientTape() as tape:
                tape.watch(logits)
                value = function(logits, *args)
            return value, tape.gradient(value, logits)

        weights = tf.constant(self.mask, "float32")
        for epsilon in (0.0, 0.1):
            loss = LabelSmoothedCrossEntropy(epsilon=epsilon)
            ours = lambda logits: loss(self.y_true, logits)  # noqa: E731
            theirs = lambda logits: reference(self.y_true, logits, epsilon, weights)  # noqa: E731
            for dtype, tolerance in (("float32", 1e-6), ("bfloat16", 1e-2)):
                logits = tf.cast(self.logits, dtype)
                for mode, wrap in (("eager", lambda f: f), ("xla", lambda f: tf.function(f, jit_compile=True))):
                    with self.subTest(epsilon=epsilon, dtype=dtype, mode=mode):
                        value, gradient = wrap(lambda x: gradients(ours, x))(logits)
                        expected_value, expected = gradients(theirs, logits)
                        self.assertEqual(gradient.dtype, logits.dtype)
                        self.assertAllClose(value, expected_value, rtol=1e-5)
                        self.assertAllClose(tf.cast(gradient, "float32"), tf.cast(expected, "float32"),
                                            atol=tolerance, rtol=tolerance)

    def test_all_padding_gives_zero(self):
        self.assertAllClose(LabelSmoothedCrossEntropy()(np.zeros((2, 3), "int32"), self.logits[:2, :3]), 0.0)

    def test_serialization_round_trip(self):
        loss = LabelSmoothedCrossEntropy(epsilon=0.2, pad_id=3, normalize=True, name="ls")
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
        self.assertIsInstance(restored, LabelSmoothedCrossEntropy)
        self.assertEqual(restored.get_config(), loss.get_config())
        self.assertEqual(
            loss.get_config(),
            {"name": "ls", "reduction": "mean_with_sample_weight", "epsilon": 0.2, "pad_id": 3, "normalize": True},
        )
        self.assertAllClose(restored(self.y_true, self.logits), loss(self.y_true, self.logits))

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ConfigError, "Received: epsilon=1.0"):
            LabelSmoothedCrossEntropy(epsilon=1.0)
        with self.assertRaisesRegex(ConfigError, "Received: epsilon=-0.1"):
            LabelSmoothedCrossEntropy(epsilon=-0.1)
        with self.assertRaisesRegex(ConfigError, "Received: pad_id=-1"):
            LabelSmoothedCrossEntropy(pad_id=-1)
        with self.assertRaisesRegex(ValueError, "reduction"):
            LabelSmoothedCrossEntropy(reduction="global")


if __name__ == "__main__":
    tf.test.main()
