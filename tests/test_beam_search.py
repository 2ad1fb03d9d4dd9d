"""Beam search (§6.1): cached equals uncached, n-best lists, length penalty, limits, both stopping rules, XLA."""

import numpy as np
import tensorflow as tf

from t2t_keras.decoding import beam_search, greedy_decode, length_penalty
from tests.reference_search import reference_beam_search
from t2t_keras.special_ids import EOS_ID
from tests.helpers import long_check
from tests.test_greedy import (
    EXTRA,
    SOURCE,
    SOURCE_LENGTHS,
    DecodingTestCase,
    assert_padding_after_eos,
    count_decoded_rows,
    decoding_model,
    output_lengths,
)


def numpy_length_penalty(length, alpha, kind):
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    return np.asarray(length, np.float64) if kind == "average" else np.ones_like(length, np.float64)


class BeamSearchTest(DecodingTestCase):
    @long_check
    def test_cached_equals_uncached_reference_for_every_length_penalty_and_stopping_rule(self):
        model = decoding_model()
        # every penalty with the default rule; the exact rule also in test_exact_early_stop_changes_nothing
        for kind, stopping in (("gnmt", "beam"), ("average", "beam"), ("none", "beam"), ("gnmt", "exact")):
            options = dict(beam_size=4, alpha=0.6, length_penalty=kind, max_extra_length=EXTRA, num_return=4,
                           stopping=stopping)
            cached = beam_search(model, SOURCE, **options)
            reference = reference_beam_search(model, SOURCE, **options)
            self.assertAllEqual(cached["tokens"], reference["tokens"], msg=(kind, stopping))
            self.assertAllClose(cached["scores"], reference["scores"], atol=1e-4, msg=(kind, stopping))
            self.assertAllClose(cached["log_probs"], reference["log_probs"], atol=1e-4, msg=(kind, stopping))

    def test_beam_rule_stops_once_twice_beam_size_hypotheses_have_finished(self):
        # Under "average" the exact bound never settles before the limit (below); the beam rule stops a sentence
        # once 2 x 4 hypotheses have ended, so the search makes fewer steps, and its n-best list holds 4 of them.
        model = decoding_model(eos_bias=2.0)
        options = dict(length_penalty="average", max_extra_length=EXTRA, num_return=4)
        exact = beam_search(model, SOURCE, stopping="exact", **options)
        exact_steps, model.decode_calls = model.decode_calls, 0
        fast = beam_search(model, SOURCE, stopping="beam", **options)
        self.assertLess(model.decode_calls, exact_steps)
        self.assertTrue(np.all(np.isfinite(fast["scores"])))
        self.assertTrue(np.all(np.diff(fast["scores"], axis=1) <= 0))
        # where the two lists differ, the exact one found a better hypothesis after the beam rule stopped
        self.assertTrue(np.all(exact["scores"][:, 0] >= fast["scores"][:, 0] - 1e-6))

    def test_a_sentence_done_early_does_not_depend_on_its_batch(self):
        # A sentence that the beam rule settles early keeps its finished set while longer ones go on.
        model = decoding_model(eos_bias=2.0)
        options = dict(length_penalty="average", max_extra_length=EXTRA, num_return=2, stopping="beam")
        together = beam_search(model, SOURCE, **options)
        for row in range(len(SOURCE)):
            alone = beam_search(model, SOURCE[row:row + 1], **options)
            self.assertAllEqual(alone["tokens"][0], together["tokens"][row], msg=row)
            self.assertAllClose(alone["scores"][0], together["scores"][row], atol=1e-5, msg=row)

    def test_exact_early_stop_changes_nothing(self):
        # The reference runs every sentence to its limit. With EOS likelier, the cached search
        # stops early under "gnmt"; under "average" a stop on the first finished hypotheses
        # (or on a bound that ignores the longest length) would miss better, longer ones.
        bound = SOURCE.shape[1] + EXTRA
        for kind, num_return, stops_early in (("gnmt", 4, True), ("gnmt", 1, True), ("average", 2, False)):
            model = decoding_model(eos_bias=2.0)  # hypotheses end after 1 to 8 tokens
            options = dict(length_penalty=kind, max_extra_length=EXTRA, num_return=num_return, stopping="exact")
            cached = beam_search(model, SOURCE, **options)
            self.assertEqual(model.decode_calls < bound, stops_early, msg=kind)
            reference = reference_beam_search(model, SOURCE, **options)
            self.assertAllEqual(cached["tokens"], reference["tokens"], msg=kind)
            self.assertAllClose(cached["scores"], reference["scores"], atol=1e-4, msg=kind)

    def test_n_best_list_is_sorted_and_scored_with_the_length_penalty(self):
        out = beam_search(decoding_model(), SOURCE, beam_size=4, alpha=0.6, max_extra_length=EXTRA, num_return=4)
        tokens, scores, log_probs = (np.asarray(out[key]) for key in ("tokens", "scores", "log_probs"))
        self.assertEqual(tokens.shape, (4, 4, SOURCE.shape[1] + EXTRA))
        self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))
        expected = log_probs / numpy_length_penalty(output_lengths(tokens), 0.6, "gnmt")
        self.assertAllClose(scores, expected, atol=1e-5)
        assert_padding_after_eos(self, tokens)
        for row in range(4):  # the n-best hypotheses of a sentence are distinct
            self.assertLen({tuple(hypothesis) for hypothesis in tokens[row]}, 4)

    def test_beam_of_one_without_penalty_is_greedy(self):
        model = decoding_model()
        beam = beam_search(model, SOURCE, beam_size=1, length_penalty="none", max_extra_length=EXTRA)
        greedy = greedy_decode(model, SOURCE, max_extra_length=EXTRA)
        self.assertAllEqual(beam["tokens"][:, 0], greedy["tokens"])
        self.assertAllClose(beam["log_probs"][:, 0], greedy["scores"], atol=1e-5)

    def test_output_length_is_input_length_plus_extra(self):
        model = decoding_model()
        out = beam_search(model, SOURCE, max_extra_length=EXTRA, min_length=100, num_return=2)
        self.assertAllEqual(output_lengths(out["tokens"]), np.repeat((SOURCE_LENGTHS + EXTRA)[:, None], 2, 1))
        capped = beam_search(model, SOURCE, max_extra_length=EXTRA, max_length=9, min_length=100)
        self.assertEqual(capped["tokens"].shape, (4, 1, 9))
        self.assertAllEqual(output_lengths(capped["tokens"][:, 0]), np.minimum(SOURCE_LENGTHS + EXTRA, 9))

    def test_stops_after_one_step_when_eos_dominates(self):
        for stopping in ("beam", "exact"):  # the beam rule stops when the exact bound does, if that is sooner
            model = decoding_model(eos_bias=20.0)
            out = beam_search(model, SOURCE, max_extra_length=EXTRA, stopping=stopping)
            self.assertAllEqual(out["tokens"][:, 0, 0], [EOS_ID] * 4)
            self.assertAllEqual(output_lengths(out["tokens"][:, 0]), [1] * 4)
            self.assertEqual(model.decode_calls, 1, msg=stopping)

    @long_check
    def test_a_growing_cache_gives_the_tokens_of_preallocated_slots(self):
        model = decoding_model()
        for stopping in ("beam", "exact"):
            options = dict(max_extra_length=EXTRA, num_return=2, stopping=stopping)
            fixed = beam_search(model, SOURCE, **options)
            graph = tf.function(lambda source: beam_search(model, source, growing_cache=True, **options))
            grown = graph(tf.constant(SOURCE))  # in graph mode, where its length axis is left open
            self.assertAllEqual(grown["tokens"], fixed["tokens"], msg=stopping)
            self.assertAllClose(grown["scores"], fixed["scores"], atol=1e-5, msg=stopping)

    def test_with_a_growing_cache_a_done_sentence_leaves_the_batch(self):
        # the batch decodes exactly the rows its sentences decode one by one: none for a sentence once it is done
        model = decoding_model()
        rows = count_decoded_rows(model)
        for stopping in ("beam", "exact"):
            graph = tf.function(lambda source: beam_search(model, source, max_extra_length=EXTRA, growing_cache=True,
                                                           stopping=stopping))
            alone = []
            for sentence in SOURCE:
                rows.assign(0)
                graph(tf.constant(sentence[None]))
                alone.append(int(rows.numpy()))
            rows.assign(0)
            graph(tf.constant(SOURCE))
            self.assertEqual(int(rows.numpy()), sum(alone), msg=stopping)
            self.assertLess(sum(alone), len(SOURCE) * max(alone), msg=stopping)

    def test_one_graph_serves_every_beam_size_and_list_length(self):
        # beam_size and num_return as tensors: one trace, the tokens of each Python-int search
        model = decoding_model()
        graph = tf.function(lambda source, beam, nbest: beam_search(
            model, source, beam_size=beam, num_return=nbest, max_extra_length=EXTRA, growing_cache=True))
        for beam_size, num_return in ((2, 1), (3, 3), (5, 2)):
            fixed = beam_search(model, SOURCE, beam_size=beam_size, num_return=num_return, max_extra_length=EXTRA)
            out = graph(tf.constant(SOURCE), tf.constant(beam_size), tf.constant(num_return))
            self.assertAllEqual(out["tokens"], fixed["tokens"], msg=beam_size)
            self.assertAllClose(out["scores"], fixed["scores"], atol=1e-5, msg=beam_size)
        self.assertEqual(graph.experimental_get_tracing_count(), 1)

    @long_check
    def test_compiled_equals_eager_with_alpha_as_a_tensor(self):
        model = decoding_model()
        compiled = tf.function(
            lambda source, alpha: beam_search(model, source, alpha=alpha, max_extra_length=EXTRA, num_return=2),
            jit_compile=True,
        )
        for alpha in (0.6, 1.5):  # one compilation serves both values
            eager = beam_search(model, SOURCE, alpha=alpha, max_extra_length=EXTRA, num_return=2)
            out = compiled(tf.constant(SOURCE), tf.constant(alpha))
            self.assertAllEqual(out["tokens"], eager["tokens"])
            self.assertAllClose(out["scores"], eager["scores"], atol=1e-5)
        self.assertEqual(compiled.experimental_get_tracing_count(), 1)

    def test_rejects_bad_options(self):
        model = decoding_model()
        for options in ({"beam_size": 0}, {"num_return": 5}, {"length_penalty": "wu"}, {"stopping": "early"}):
            with self.assertRaisesRegex(ValueError, "Received"):
                beam_search(model, SOURCE, **options)


class LengthPenaltyTest(DecodingTestCase):
    def test_matches_the_formulas(self):
        lengths = np.arange(1, 61)
        for kind in ("gnmt", "average", "none"):
            for alpha in (0.0, 0.6, 1.0):
                self.assertAllClose(length_penalty(lengths, alpha, kind), numpy_length_penalty(lengths, alpha, kind),
                                    rtol=1e-6)

    def test_gnmt_golden_values(self):
        # ((5 + 1) / 6) ** 0.6 = 1 and ((5 + 7) / 6) ** 0.6 = 2 ** 0.6.
        self.assertAllClose(length_penalty([1, 7], 0.6, "gnmt"), [1.0, 2**0.6])

    def test_unknown_kind_is_rejected(self):
        with self.assertRaisesRegex(ValueError, "length_penalty must be one of"):
            length_penalty(3, 0.6, "wu")
