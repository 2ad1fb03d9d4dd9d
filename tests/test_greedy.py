"""Greedy and sampled decoding: cached equals uncached, length limits, early stop, sampling, XLA."""

import warnings

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.decoding import greedy_decode
from tests.reference_search import reference_greedy
from t2t_keras.decoding.sampling import top_k_filter
from t2t_keras.model import Transformer
from t2t_keras.special_ids import EOS_ID
from tests.helpers import TINY, TestCase

# Four sources of real lengths 7, 4, 2 and 7 (EOS included), padded with 0.
SOURCE = np.array(
    [
        [11, 32, 45, 19, 27, 8, 3],
        [23, 9, 31, 3, 0, 0, 0],
        [17, 3, 0, 0, 0, 0, 0],
        [5, 44, 12, 38, 30, 21, 3],
    ],
    np.int32,
)
SOURCE_LENGTHS = np.array([7, 4, 2, 7])
EXTRA = 6


class EosBiasedTransformer(Transformer):
    """A Transformer whose EOS logit gets `eos_bias` added, and which counts `decode` calls.

    The bias steers when sentences end; in eager mode the count is the number
    of decoding steps that ran.
    """

    def __init__(self, eos_bias=0.0, **kwargs):
        super().__init__(**kwargs)
        self.eos_bias = eos_bias
        self.decode_calls = 0

    def project(self, hidden):
        return super().project(hidden) + self.eos_bias * tf.one_hot(EOS_ID, self.vocab_size)

    def decode_step(self, *args, **kwargs):
        self.decode_calls += 1
        return super().decode_step(*args, **kwargs)


def decoding_model(eos_bias=1.0):
    """Tiny untied model, seeded, whose outputs on SOURCE vary in length and content."""
    keras.utils.set_random_seed(0)
    model = EosBiasedTransformer(eos_bias, **dict(TINY, dropout=0.0, tie_embeddings="none"))
    model.build()
    return model


def output_lengths(tokens):
    """Number of ids before the padding of each row (EOS included)."""
    return np.count_nonzero(np.asarray(tokens), axis=-1)


def assert_padding_after_eos(test, tokens):
    for row in np.asarray(tokens).reshape(-1, np.shape(tokens)[-1]):
        length = np.count_nonzero(row)
        test.assertAllEqual(row[length:], np.zeros_like(row[length:]))
        test.assertNotIn(EOS_ID, row[:length - 1])


def count_decoded_rows(model):
    """A variable that sums the rows of every `model.decode_step` call, in graph mode as in eager mode."""
    rows, decode_step = tf.Variable(0), model.decode_step

    def counting(tokens, *args, **kwargs):
        rows.assign_add(tf.shape(tokens)[0])
        return decode_step(tokens, *args, **kwargs)

    model.decode_step = counting
    return rows


class DecodingTestCase(TestCase):
    def setUp(self):
        super().setUp()
        # The uncached reference decodes a one-token prefix, where Keras warns about a size-1 softmax.
        warnings.filterwarnings("ignore", message="You are using a softmax over axis -1")


class GreedyDecodeTest(DecodingTestCase):
    def test_cached_equals_uncached_reference(self):
        model = decoding_model()
        cached = greedy_decode(model, SOURCE, max_extra_length=EXTRA)
        reference = reference_greedy(model, SOURCE, max_extra_length=EXTRA)
        self.assertAllEqual(cached["tokens"], reference["tokens"])
        self.assertAllClose(cached["scores"], reference["scores"], atol=1e-4)
        # Row 0 ends with EOS; rows 1-3 are cut at their limits 10, 8 and 13 (the bound).
        self.assertAllEqual(output_lengths(cached["tokens"]), [5, 10, 8, 13])
        self.assertEqual(cached["tokens"][0, 4], EOS_ID)

    def test_tokens_after_eos_are_padding(self):
        tokens = greedy_decode(decoding_model(), SOURCE, max_extra_length=EXTRA)["tokens"]
        assert_padding_after_eos(self, tokens)

    def test_score_is_the_teacher_forced_log_probability(self):
        model = decoding_model()
        out = greedy_decode(model, SOURCE, max_extra_length=EXTRA)
        self.assertAllClose(out["scores"], teacher_forced_log_prob(model, SOURCE, out["tokens"]), atol=1e-4)

    def test_output_length_is_input_length_plus_extra(self):
        model = decoding_model()
        out = greedy_decode(model, SOURCE, max_extra_length=EXTRA, min_length=100)  # EOS never allowed
        self.assertEqual(out["tokens"].shape, (4, SOURCE.shape[1] + EXTRA))
        self.assertAllEqual(output_lengths(out["tokens"]), SOURCE_LENGTHS + EXTRA)
        capped = greedy_decode(model, SOURCE, max_extra_length=EXTRA, max_length=9, min_length=100)
        self.assertEqual(capped["tokens"].shape, (4, 9))
        self.assertAllEqual(output_lengths(capped["tokens"]), np.minimum(SOURCE_LENGTHS + EXTRA, 9))

    def test_stops_when_every_sentence_has_ended(self):
        model = decoding_model(eos_bias=20.0)
        tokens = greedy_decode(model, SOURCE, max_extra_length=EXTRA)["tokens"]
        self.assertAllEqual(tokens[:, 0], [EOS_ID] * 4)
        self.assertAllEqual(tokens[:, 1:], np.zeros((4, tokens.shape[1] - 1)))
        self.assertEqual(model.decode_calls, 1)

    def test_compiled_equals_eager(self):
        model = decoding_model()
        compiled = tf.function(lambda source: greedy_decode(model, source, max_extra_length=EXTRA),
                               jit_compile=True)
        eager = greedy_decode(model, SOURCE, max_extra_length=EXTRA)
        out = compiled(tf.constant(SOURCE))
        self.assertAllEqual(out["tokens"], eager["tokens"])
        self.assertAllClose(out["scores"], eager["scores"], atol=1e-5)


    def test_a_growing_cache_gives_the_tokens_of_preallocated_slots(self):
        model = decoding_model()
        graph = tf.function(lambda source: greedy_decode(model, source, max_extra_length=EXTRA, growing_cache=True))
        out, fixed = graph(tf.constant(SOURCE)), greedy_decode(model, SOURCE, max_extra_length=EXTRA)
        self.assertAllEqual(out["tokens"], fixed["tokens"])
        self.assertAllClose(out["scores"], fixed["scores"], atol=1e-5)

    def test_with_a_growing_cache_a_finished_sentence_leaves_the_batch(self):
        # each sentence is decoded for as many steps as it has tokens, not for as many as the batch's longest
        model = decoding_model()
        rows = count_decoded_rows(model)
        graph = tf.function(lambda source: greedy_decode(model, source, max_extra_length=EXTRA, growing_cache=True))
        lengths = output_lengths(graph(tf.constant(SOURCE))["tokens"])
        self.assertEqual(int(rows.numpy()), lengths.sum())
        self.assertLess(lengths.sum(), len(SOURCE) * lengths.max())


class SamplingTest(DecodingTestCase):
    def test_top_1_sampling_is_argmax(self):
        model = decoding_model()
        sampled = greedy_decode(model, SOURCE, max_extra_length=EXTRA, temperature=1.0, top_k=1, seed=7)
        self.assertAllEqual(sampled["tokens"], greedy_decode(model, SOURCE, max_extra_length=EXTRA)["tokens"])

    def test_a_growing_cache_samples_the_tokens_of_preallocated_slots(self):
        # a sampler keeps every row in the batch, so a seed draws the same tokens with either cache
        model = decoding_model()
        options = dict(max_extra_length=EXTRA, temperature=1.0, seed=7)
        graph = tf.function(lambda source: greedy_decode(model, source, growing_cache=True, **options))
        self.assertAllEqual(graph(tf.constant(SOURCE))["tokens"], greedy_decode(model, SOURCE, **options)["tokens"])

    def test_zero_temperature_tensor_is_argmax(self):
        model = decoding_model()
        sampled = greedy_decode(model, SOURCE, max_extra_length=EXTRA, temperature=tf.constant(0.0), seed=1)
        self.assertAllEqual(sampled["tokens"], greedy_decode(model, SOURCE, max_extra_length=EXTRA)["tokens"])

    def test_seed_makes_samples_repeatable(self):
        model = decoding_model()

        def sample(seed):
            return greedy_decode(model, SOURCE, max_extra_length=EXTRA, temperature=2.0, seed=seed)

        first, again, other = sample(3), sample(3), sample(4)
        self.assertAllEqual(first["tokens"], again["tokens"])
        self.assertNotAllEqual(first["tokens"], other["tokens"])
        assert_padding_after_eos(self, first["tokens"])
        self.assertAllClose(first["scores"], teacher_forced_log_prob(model, SOURCE, first["tokens"]), atol=1e-4)

    def test_top_k_filter_keeps_the_k_largest(self):
        logits = tf.constant([[0.1, 2.0, -1.0, 0.5, 3.0], [1.0, 0.0, 2.0, -3.0, 0.5]])
        kept = np.isfinite(top_k_filter(logits, tf.constant(2)).numpy())
        self.assertAllEqual(kept, [[False, True, False, False, True], [True, False, True, False, False]])
        self.assertAllEqual(top_k_filter(logits, 0), logits)


def teacher_forced_log_prob(model, source, tokens):
    """Sum of log p(token) over the non-padding `tokens`, from one full decoder pass."""
    tokens = np.asarray(tokens)
    target_in = np.concatenate([np.full((len(tokens), 1), 2, np.int32), tokens[:, :-1]], axis=1)
    logits = model.decode(target_in, model.encode(source), model.source_mask(source))
    log_probs = tf.gather(tf.nn.log_softmax(logits), tokens, batch_dims=2).numpy()
    return np.where(tokens != 0, log_probs, 0.0).sum(axis=1)
