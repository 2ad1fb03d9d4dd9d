"""MaskedAccuracy and Perplexity over several batches against numpy."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.training.metrics import MaskedAccuracy, Perplexity
from tests.helpers import TestCase


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class TokenMetricsTest(TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        # Batch 1 has 8 tokens, batch 2 has 2: a mean of batch means would weight them equally.
        self.batches = [
            (np.array([[4, 2, 3, 1], [2, 2, 5, 0], [3, 0, 0, 0]], "int32"), rng.normal(size=(3, 4, 6))),
            (np.array([[5, 1, 0], [0, 0, 0]], "int32"), rng.normal(size=(2, 3, 6))),
        ]
        for y_true, logits in self.batches:  # make some predictions right
            logits[..., 2] += 1.5 * (y_true == 2)
        gold = [np.take_along_axis(log_softmax(logits), y[..., None], -1)[..., 0][y != 0] for y, logits in self.batches]
        hits = [(logits.argmax(-1) == y)[y != 0] for y, logits in self.batches]
        self.expected_perplexity = np.exp(-np.concatenate(gold).mean())
        self.expected_accuracy = np.concatenate(hits).mean()
        self.mean_of_batch_means = (np.exp(-np.mean([g.mean() for g in gold])), np.mean([h.mean() for h in hits]))

    def update(self, metric, dtype="float32"):
        for y_true, logits in self.batches:
            metric.update_state(y_true, tf.constant(logits, dtype))
        return metric.result()

    def test_accuracy_over_batches(self):
        self.assertAllClose(self.update(MaskedAccuracy()), self.expected_accuracy)
        self.assertNotAlmostEqual(self.expected_accuracy, 0.0)
        self.assertGreater(abs(self.mean_of_batch_means[1] - self.expected_accuracy), 0.05)

    def test_perplexity_over_batches(self):
        self.assertAllClose(self.update(Perplexity()), self.expected_perplexity, rtol=1e-5)
        self.assertGreater(abs(self.mean_of_batch_means[0] - self.expected_perplexity), 0.05)

    def test_perplexity_with_float16_logits(self):
        self.assertAllClose(self.update(Perplexity(), "float16"), self.expected_perplexity, rtol=2e-3)

    def test_reset_state(self):
        metric = Perplexity()
        metric.update_state(*self.batches[1])
        metric.reset_state()
        self.assertAllClose(self.update(metric), self.expected_perplexity, rtol=1e-5)
        metric.reset_state()
        self.assertAllClose(metric.result(), 1.0)  # exp(0 / 0 -> 0)

    def test_sample_weight_multiplies_padding_mask(self):
        y_true, logits = self.batches[0]
        metric = MaskedAccuracy()
        metric.update_state(y_true, logits, sample_weight=np.array([1.0, 0.0, 1.0]))
        hits = (logits.argmax(-1) == y_true)[[0, 2]][y_true[[0, 2]] != 0]
        self.assertAllClose(metric.result(), hits.mean())

    def test_serialization_round_trip(self):
        for metric in (MaskedAccuracy(pad_id=3, name="acc"), Perplexity(pad_id=3, name="ppl")):
            restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
            self.assertIsInstance(restored, type(metric))
            self.assertEqual(restored.get_config(), metric.get_config())
            self.assertEqual(restored.pad_id, 3)


if __name__ == "__main__":
    tf.test.main()
