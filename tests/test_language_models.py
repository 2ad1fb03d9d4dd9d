"""The single-stack models: a causal LM from decoder blocks without cross-attention, a masked LM from the encoder."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.build import build_model
from t2t_keras.config import load_config
from t2t_keras.data.masking import FIRST_REGULAR_ID, mask_tokens, masked_lm_batches
from t2t_keras.decoding import beam_search, continue_prompts, greedy_decode
from t2t_keras.language_models import CausalLanguageModel, MaskedLanguageModel
from t2t_keras.layers import DecoderBlock
from t2t_keras.params import count_parameters
from t2t_keras.special_ids import BOS_ID, EOS_ID, UNK_ID
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from tests.helpers import TestCase, random_ids

SMALL = dict(vocab_size=40, hidden_dim=16, num_layers=2, num_heads=4, intermediate_dim=32, dropout=0.0,
             max_length=32)


def causal_lm(**overrides):
    keras.utils.set_random_seed(3)
    model = CausalLanguageModel(**dict(SMALL, **overrides))
    model.build()
    return model


def uncached_greedy(model, prompt, new_tokens):
    """Greedy continuation by re-running the whole sequence each step (no cache), in numpy."""
    sequence = [BOS_ID] + list(prompt)
    out = []
    for _ in range(new_tokens):
        logits = model(np.array([sequence], np.int32)).numpy()[0, -1]
        logits[[0, BOS_ID]] = -np.inf
        token = int(np.argmax(logits))
        out.append(token)
        if token == EOS_ID:
            break
        sequence.append(token)
    return out


class CausalLanguageModelTest(TestCase):
    def test_is_causal(self):
        model = causal_lm()
        ids = random_ids(2, 8, vocab_size=40, seed=1)
        changed = ids.copy()
        changed[:, 5:] = random_ids(2, 3, vocab_size=40, seed=2)
        self.assertAllClose(model(ids)[:, :5], model(changed)[:, :5], atol=1e-5)
        self.assertNotAllClose(model(ids)[:, 5:], model(changed)[:, 5:])

    def test_its_blocks_have_no_cross_attention_and_refuse_a_memory(self):
        model = causal_lm()
        self.assertFalse(any(hasattr(block, "cross_attention") for block in model.decoder.blocks))
        block = DecoderBlock(num_heads=2, intermediate_dim=8, use_cross_attention=False)
        x = np.ones((1, 3, 8), "float32")
        with self.assertRaisesRegex(ValueError, "no cross-attention"):
            block(x, x)
        with self.assertRaisesRegex(ValueError, "needs the encoder output"):
            DecoderBlock(num_heads=2, intermediate_dim=8)(x)

    def test_cached_steps_equal_the_full_pass(self):
        model = causal_lm(normalize_first=True, position_encoding="learned", tie_embeddings=False)
        ids = random_ids(3, 7, vocab_size=40, seed=4)
        cache = model.init_cache(ids, max_length=7)
        steps = []
        for t in range(7):
            out = model.decode_step(ids[:, t:t + 1], cache, t)
            steps.append(out.logits)
            cache = out.cache
        self.assertAllClose(tf.concat(steps, axis=1), model(ids), atol=1e-4)

    def test_cached_generation_equals_uncached_for_prompts_of_different_lengths(self):
        model = causal_lm()
        prompts = [[5, 6, 7, 8], [9, 10]]
        padded = np.zeros((2, 4), np.int32)
        for i, prompt in enumerate(prompts):
            padded[i, :len(prompt)] = prompt
        out = continue_prompts(model, padded, max_extra_length=6)
        for row, prompt in zip(out["tokens"].numpy(), prompts):
            expected = uncached_greedy(model, prompt, 6)
            self.assertEqual(list(row[:len(expected)]), expected)
            self.assertTrue(np.all(row[len(expected):] == 0))

    def test_prompt_is_forced_and_not_scored(self):
        model = causal_lm()
        prompt = np.array([[5, 6, 7]], np.int32)
        full = greedy_decode(model, prompt, max_extra_length=4, max_length=7, forced_prefix=prompt)
        self.assertEqual(list(full["tokens"].numpy()[0, :3]), [5, 6, 7])
        continuation = continue_prompts(model, prompt, max_extra_length=4)
        self.assertAllClose(continuation["scores"], full["scores"])
        log_probs = tf.nn.log_softmax(model(np.array([[BOS_ID, 5, 6, 7]], np.int32))[0, -1]).numpy()
        first = continuation["tokens"].numpy()[0, 0]
        self.assertLess(continuation["scores"].numpy()[0], log_probs[first] + 1e-4)  # no prompt term inside

    def test_beam_of_one_without_penalty_is_greedy_and_sampling_keeps_the_prompt(self):
        model = causal_lm()
        prompt = np.array([[5, 6], [7, 0]], np.int32)
        greedy = continue_prompts(model, prompt, max_extra_length=5)["tokens"]
        beam = beam_search(model, prompt, beam_size=1, length_penalty="none", max_extra_length=5, max_length=7,
                           forced_prefix=prompt)["tokens"][:, 0]
        self.assertAllEqual(beam[0, :2], [5, 6])
        beam4 = continue_prompts(model, prompt, max_extra_length=5, beam_size=4)["tokens"]
        self.assertEqual(beam4.shape, (2, 5))
        sampled = greedy_decode(model, prompt, max_extra_length=5, max_length=7, forced_prefix=prompt,
                                temperature=1.0, seed=7)["tokens"].numpy()
        self.assertEqual(list(sampled[0, :2]), [5, 6])
        self.assertEqual(sampled[1, 0], 7)
        self.assertAllEqual(continue_prompts(model, prompt, max_extra_length=5)["tokens"], greedy)  # deterministic

    def test_serialization_round_trip(self):
        model = causal_lm(position_encoding="learned")
        ids = random_ids(2, 5, vocab_size=40, seed=5)
        clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
        self.assertTrue(clone.built)  # built from its saved build config
        clone.set_weights(model.get_weights())
        self.assertEqual(clone.get_config(), model.get_config())
        self.assertAllClose(clone(ids), model(ids), atol=1e-6)


class MaskedLanguageModelTest(TestCase):
    def setUp(self):
        keras.utils.set_random_seed(4)
        self.model = MaskedLanguageModel(**SMALL)
        self.model.build()

    def test_is_bidirectional_and_ignores_padding(self):
        ids = random_ids(2, 8, vocab_size=40, seed=6)
        changed = ids.copy()
        changed[:, 6] = (changed[:, 6] + 1 - FIRST_REGULAR_ID) % (40 - FIRST_REGULAR_ID) + FIRST_REGULAR_ID
        self.assertNotAllClose(self.model(ids)[:, :6], self.model(changed)[:, :6])  # later tokens matter
        padded = np.pad(ids, ((0, 0), (0, 3)))
        self.assertAllClose(self.model(padded)[:, :8], self.model(ids), atol=1e-5)
        self.assertAllClose(self.model.pooled(padded), self.model.pooled(ids), atol=1e-5)
        self.assertEqual(self.model.pooled(ids).shape, (2, 16))

    def test_loss_counts_the_masked_positions_only(self):
        ids = random_ids(4, 10, vocab_size=40, seed=7)
        inputs, labels, weights = mask_tokens(ids, [1, 2], vocab_size=40, rate=0.3)
        logits = self.model(inputs)
        loss = LabelSmoothedCrossEntropy(epsilon=0.0, reduction="sum")
        total = float(loss(labels, logits, sample_weight=weights))
        noise = tf.where(weights[:, :, None] > 0, 0.0, tf.random.stateless_normal(logits.shape, [3, 4]) * 5)
        self.assertAllClose(float(loss(labels, logits + noise, sample_weight=weights)), total, rtol=1e-5)
        log_probs = tf.nn.log_softmax(logits).numpy()
        chosen = np.argwhere(weights.numpy() > 0)
        expected = -sum(log_probs[b, t, labels.numpy()[b, t]] for b, t in chosen)
        self.assertAllClose(total, expected, rtol=1e-4)

    def test_serialization_round_trip(self):
        ids = random_ids(2, 5, vocab_size=40, seed=8)
        clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(self.model))
        self.assertEqual(clone.get_config(), self.model.get_config())
        clone.set_weights(self.model.get_weights())
        self.assertAllClose(clone(ids), self.model(ids), atol=1e-6)


class MaskingTest(TestCase):
    def test_eighty_ten_ten_of_fifteen_percent_of_regular_tokens(self):
        ids = random_ids(200, 100, vocab_size=1000, seed=9)
        ids[:, 90:] = 0  # padding
        ids[:, 0] = EOS_ID  # a special id: never chosen
        inputs, labels, weights = (t.numpy() for t in mask_tokens(ids, [5, 6], vocab_size=1000))
        chosen = weights > 0
        regular = ids >= FIRST_REGULAR_ID
        self.assertFalse(np.any(chosen & ~regular))
        self.assertAllEqual(labels, ids)
        self.assertAllEqual(inputs[~chosen], ids[~chosen])
        self.assertAllClose(chosen.sum() / regular.sum(), 0.15, atol=0.01)
        masked = np.mean(inputs[chosen] == UNK_ID)
        kept = np.mean(inputs[chosen] == ids[chosen])
        self.assertAllClose([masked, kept], [0.8, 0.1], atol=0.02)  # kept includes random draws of the same id
        self.assertTrue(np.all(inputs[chosen & (inputs != UNK_ID)] >= FIRST_REGULAR_ID))

    def test_deterministic_per_batch_in_tf_data(self):
        batches = tf.data.Dataset.from_tensor_slices(random_ids(4, 20, vocab_size=50, seed=10)).batch(2)
        first = [x[0].numpy() for x in masked_lm_batches(batches, 50, seed=3)]
        again = [x[0].numpy() for x in masked_lm_batches(batches, 50, seed=3)]
        other = [x[0].numpy() for x in masked_lm_batches(batches, 50, seed=4)]
        self.assertAllEqual(first, again)
        self.assertFalse(all(np.array_equal(a, b) for a, b in zip(first, other)))
        self.assertFalse(np.array_equal(first[0], first[1]))


class BuildAndCountTest(TestCase):
    def test_parameter_counts_match_the_built_models(self):
        for architecture in ("encoder_decoder", "decoder_only", "encoder_only"):
            for tie in ("all", "none"):
                with self.subTest(architecture=architecture, tie=tie):
                    config = load_config("tiny", [f"model.architecture={architecture}",
                                                  f"model.tie_embeddings={tie}", "model.position_encoding=learned",
                                                  "model.normalize_first=true"])
                    model = build_model(config.model)
                    self.assertEqual(model.count_params(), count_parameters(config.model)["total"])

    def test_presets(self):
        self.assertIsInstance(build_model(load_config("lm-mini").model), CausalLanguageModel)
        self.assertIsInstance(build_model(load_config("mlm-mini").model), MaskedLanguageModel)
