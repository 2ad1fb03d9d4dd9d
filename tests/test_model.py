"""The Transformer model (§3): causality, padding invariance, cached decoding, saving, precision."""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.model import Transformer
from tests.helpers import TestCase, random_ids, tiny_transformer


class CausalityTest(TestCase):
    def test_future_target_tokens_do_not_change_earlier_logits(self):
        model = tiny_transformer()
        source, target = random_ids(2, 6, seed=1), random_ids(2, 7, seed=2)
        changed = target.copy()
        changed[:, 4:] = random_ids(2, 3, seed=3)
        before, after = model((source, target)).numpy(), model((source, changed)).numpy()
        self.assertAllClose(before[:, :4], after[:, :4], atol=1e-5)
        self.assertNotAllClose(before[:, 4:], after[:, 4:])


class PaddingInvarianceTest(TestCase):
    def test_source_padding_leaves_outputs_unchanged(self):
        for normalize_first in (False, True):
            model = tiny_transformer(normalize_first=normalize_first)
            source, target = random_ids(2, 5, seed=4), random_ids(2, 6, seed=5)
            padded = np.pad(source, ((0, 0), (0, 4)))  # pad id 0
            self.assertAllClose(model((source, target)), model((padded, target)), atol=1e-5)

    def test_target_padding_leaves_real_positions_unchanged(self):
        model = tiny_transformer()
        source, target = random_ids(2, 5, seed=6), random_ids(2, 4, seed=7)
        padded = np.pad(target, ((0, 0), (0, 3)))
        self.assertAllClose(model((source, target)), model((source, padded))[:, :4], atol=1e-5)


class CachedDecodingTest(TestCase):
    def _check(self, model, length=6):
        source = np.pad(random_ids(3, 5, seed=8), ((0, 0), (0, 2)))
        target = random_ids(3, length, seed=9)
        memory = model.encode(source)
        source_mask = model.source_mask(source)
        full = model.decode(target, memory, source_mask)
        cache = model.init_cache(memory, max_length=length)
        steps = []
        for t in range(length):
            logits, cache, _ = model.decode_step(target[:, t:t + 1], cache, t, source_mask)
            steps.append(logits)
        self.assertAllClose(tf.concat(steps, axis=1), full, atol=1e-4)

    def test_one_step_decoding_equals_teacher_forcing(self):
        self._check(tiny_transformer())

    def test_with_learned_positions_pre_ln_and_untied_embeddings(self):
        self._check(tiny_transformer(position_encoding="learned", normalize_first=True, tie_embeddings="none",
                                     max_length=16))

    def test_inside_a_compiled_function(self):
        model = tiny_transformer()
        source, target = random_ids(2, 4, seed=10), random_ids(2, 3, seed=11)
        memory = model.encode(source)
        mask = model.source_mask(source)

        @tf.function(jit_compile=True)
        def step(token, cache, index):
            out = model.decode_step(token, cache, index, mask)
            return out.logits, out.cache

        cache = model.init_cache(memory, 3)
        outputs = []
        for t in range(3):
            logits, cache = step(target[:, t:t + 1], cache, tf.constant(t))
            outputs.append(logits)
        self.assertAllClose(tf.concat(outputs, 1), model.decode(target, memory, mask), atol=1e-4)


class EmbeddingSharingTest(TestCase):
    def test_one_matrix_shared_three_ways_by_default(self):
        model = tiny_transformer()
        embeddings = [w for w in model.weights if "embeddings" in w.path]
        self.assertLen(embeddings, 1)
        self.assertIs(model.source_embedding, model.target_embedding)

    def test_untied_variants_have_more_matrices(self):
        base = tiny_transformer().count_params()
        extra = 50 * 16
        self.assertEqual(tiny_transformer(tie_embeddings="target").count_params(), base + extra)
        self.assertEqual(tiny_transformer(tie_embeddings="none").count_params(), base + 2 * extra)


class SavingTest(TestCase):
    def test_keras_file_round_trip_gives_identical_outputs(self):
        for kwargs in ({}, {"position_encoding": "learned", "normalize_first": True, "tie_embeddings": "target",
                            "max_length": 32, "key_dim": 8, "value_dim": 6, "num_decoder_layers": 1}):
            model = tiny_transformer(**kwargs)
            source, target = random_ids(2, 5, seed=12), random_ids(2, 4, seed=13)
            expected = model((source, target))
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "model.keras")
                model.save(path)
                restored = keras.models.load_model(path)
            self.assertIsInstance(restored, Transformer)
            self.assertEqual(restored.get_config(), model.get_config())
            self.assertAllEqual(restored((source, target)), expected)

    def test_tf_checkpoint_holds_every_weight(self):
        model = tiny_transformer(normalize_first=True)
        with tempfile.TemporaryDirectory() as tmp:
            path = tf.train.Checkpoint(model=model).save(os.path.join(tmp, "ckpt"))
            stored = [k for k in tf.train.list_variables(path) if k[0].startswith("model/")]
            clone = tiny_transformer(normalize_first=True)
            tf.train.Checkpoint(model=clone).restore(path).assert_existing_objects_matched()
        self.assertLen(stored, len(model.weights))
        for a, b in zip(model.get_weights(), clone.get_weights()):
            self.assertAllEqual(a, b)

    def test_from_config_builds_the_same_architecture(self):
        model = tiny_transformer()
        clone = Transformer.from_config(model.get_config())
        clone.build()
        self.assertEqual(clone.count_params(), model.count_params())


class MixedPrecisionTest(TestCase):
    def test_mixed_policies_run_and_logits_stay_float32(self):
        source, target = random_ids(2, 5, seed=14), random_ids(2, 4, seed=15)
        reference = tiny_transformer()
        expected = reference((source, target))
        for policy in ("mixed_float16", "mixed_bfloat16"):
            model = tiny_transformer(dtype=policy)
            model.set_weights(reference.get_weights())
            logits = model((source, target))
            self.assertEqual(logits.dtype, tf.float32)
            self.assertTrue(np.all(np.isfinite(logits.numpy())))
            self.assertAllClose(logits, expected, atol=0.1)  # bfloat16 keeps ~3 significant digits
            memory = model.encode(source)
            self.assertEqual(memory.dtype, tf.float16 if policy == "mixed_float16" else tf.bfloat16)


class TrainingStepTest(TestCase):
    def test_fit_reduces_the_loss_on_a_copy_task(self):
        keras.utils.set_random_seed(0)
        model = tiny_transformer()
        source = random_ids(64, 6, seed=16)
        target_in = np.concatenate([np.full((64, 1), 2), source], 1).astype("int32")
        target_out = np.concatenate([source, np.full((64, 1), 3)], 1).astype("int32")
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit((source, target_in), target_out, batch_size=16, epochs=25, verbose=0)
        self.assertLess(history.history["loss"][-1], 0.6 * history.history["loss"][0])


if __name__ == "__main__":
    tf.test.main()
