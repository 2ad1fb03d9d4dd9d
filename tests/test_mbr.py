"""Minimum Bayes risk decoding (`decoding.mbr`): the chooser on utilities worked out by hand, chrF and BLEU
utilities against sacreBLEU's own sentence scores, reference aggregation, one line's N x N at a time, the request
fields and their refusals, every artifact kind's generate, and `translate --mbr` and REST on the tiny run."""

import unittest
from unittest import mock

import fastchrf
import numpy as np
import sacrebleu

from t2t_keras.artifacts.base import Artifact
from t2t_keras.decoding import mbr
from t2t_keras.decoding.parameters import DecodingParameterError
from t2t_keras.decoding.request import GenerationRequest, empty_generation
from t2t_keras.errors import T2TError

# Three candidates, two of them nearly the same: either of those two is the consensus, the third never is.
AGREEING = ["the red house is on the hill .", "the red house is on a hill .", "a cat sleeps in the garden"]


class ChooserTest(unittest.TestCase):
    """`expected_from_matrix` and `choose` on utility matrices built by hand."""

    def test_the_candidate_the_others_agree_with_wins(self):
        utilities = [[100, 80, 10],
                     [80, 100, 20],
                     [10, 20, 100]]
        # Row means without the diagonal: (80 + 10) / 2 = 45, (80 + 20) / 2 = 50, (10 + 20) / 2 = 15.
        np.testing.assert_allclose(mbr.expected_from_matrix(utilities), [45.0, 50.0, 15.0])
        self.assertEqual(mbr.choose(mbr.expected_from_matrix(utilities)), mbr.MBRChoice(1, 50.0))

    def test_the_diagonal_is_left_out(self):
        with_self = [[100, 30], [60, 0]]  # candidate 1 against itself scores 0 (an empty text), the pair decides
        np.testing.assert_allclose(mbr.expected_from_matrix(with_self), [30.0, 60.0])
        self.assertEqual(mbr.choose(mbr.expected_from_matrix(with_self)).index, 1)

    def test_the_first_of_equals_is_chosen(self):
        self.assertEqual(mbr.choose([20.0, 50.0, 50.0]), mbr.MBRChoice(1, 50.0))

    def test_a_matrix_that_is_not_square_or_too_small_is_refused(self):
        with self.assertRaisesRegex(ValueError, "square"):
            mbr.expected_from_matrix([[1, 2, 3], [4, 5, 6]])
        with self.assertRaisesRegex(ValueError, "at least 2"):
            mbr.expected_from_matrix([[100]])


class UtilityTest(unittest.TestCase):
    """The pairwise utilities are sacreBLEU's sentence chrF and BLEU; aggregation as Vamvas and Sennrich 2024."""

    def test_pairwise_chrf_is_sacrebleus_sentence_chrf(self):
        matrix = mbr.pairwise_utilities(AGREEING, "chrf")
        expected = [[sacrebleu.sentence_chrf(h, [r]).score for r in AGREEING] for h in AGREEING]
        np.testing.assert_allclose(matrix, expected, rtol=1e-9)

    def test_pairwise_bleu_is_sacrebleus_sentence_bleu(self):
        candidates = AGREEING + ["", "house"]
        matrix = mbr.pairwise_utilities(candidates, "bleu")
        expected = [[sacrebleu.sentence_bleu(h, [r]).score for r in candidates] for h in candidates]
        np.testing.assert_allclose(matrix, expected, rtol=1e-9, atol=1e-12)

    def test_the_agreeing_candidates_win_under_every_utility_and_mode(self):
        for utility in mbr.UTILITIES:
            for aggregate in (False, True):
                with self.subTest(utility=utility, aggregate=aggregate):
                    self.assertIn(mbr.choose_candidate(AGREEING, utility, aggregate).index, (0, 1))

    def test_expected_utility_is_the_mean_against_the_others(self):
        choice = mbr.choose_candidate(AGREEING, "chrf")
        others = [r for i, r in enumerate(AGREEING) if i != choice.index]
        by_hand = np.mean([sacrebleu.sentence_chrf(AGREEING[choice.index], [r]).score for r in others])
        self.assertAlmostEqual(choice.expected_utility, by_hand, places=9)

    def test_aggregate_bleu_scores_against_the_mean_ngram_counts(self):
        # Aggregate of "a b c d" and "a b c e": a b c, a b, b c, a b c count 1; d, e, c d, c e, ... count 1/2.
        # "a b c d" matches 3.5 of 4 unigrams, 2.5 of 3 bigrams, 1.5 of 2 trigrams, 0.5 of 1 4-gram; lengths equal.
        by_hand = 100 * (3.5 / 4 * 2.5 / 3 * 1.5 / 2 * 0.5 / 1) ** 0.25
        np.testing.assert_allclose(mbr.aggregate_utilities(["a b c d", "a b c e"], "bleu"), [by_hand, by_hand])

    def test_aggregate_bleu_applies_the_brevity_penalty_of_the_mean_length(self):
        # "a b" against the aggregate of itself and "a b c d": a, b and "a b" count 1 there, so its unigrams match
        # 2 of 2 and its bigram 1 of 1 (no longer n-grams: effective order 2); mean length 3: penalty exp(1 - 3/2).
        got = mbr.aggregate_utilities(["a b", "a b c d"], "bleu")[0]
        self.assertAlmostEqual(got, 100 * np.exp(1 - 3 / 2), places=9)

    def test_aggregate_chrf_is_fastchrf_reference_aggregation(self):
        np.testing.assert_allclose(mbr.aggregate_utilities(AGREEING, "chrf"),
                                   fastchrf.aggregate_chrf([AGREEING], [AGREEING])[0])
        np.testing.assert_allclose(mbr.aggregate_utilities(["same text"] * 3, "chrf"), [100.0] * 3)

    def test_an_unknown_utility_is_refused(self):
        with self.assertRaisesRegex(DecodingParameterError, "chrf"):
            mbr.pairwise_utilities(AGREEING, "comet")

    def test_utilities_are_computed_one_line_at_a_time(self):
        generation = _generation([AGREEING, list(reversed(AGREEING)), ["x y", "x y", "x z"]])
        shapes = []
        real = fastchrf.pairwise_chrf

        def recording(hypotheses, references, **options):
            shapes.append((len(hypotheses), [len(h) for h in hypotheses], [len(r) for r in references]))
            return real(hypotheses, references, **options)

        with mock.patch.object(fastchrf, "pairwise_chrf", recording):
            mbr.chosen(generation, GenerationRequest(mbr="chrf", candidates=3, candidates_from="beam"))
        self.assertEqual(shapes, [(1, [3], [3])] * 3)  # never more than one line's 3 x 3


class RequestTest(unittest.TestCase):
    """The MBR fields of `GenerationRequest`, their checks, and the request of the candidates."""

    def test_defaults_leave_mbr_off(self):
        request = GenerationRequest()
        self.assertIsNone(request.mbr)
        self.assertEqual((request.candidates, request.candidates_from, request.mbr_aggregate),
                         (mbr.DEFAULT_CANDIDATES, mbr.DEFAULT_SOURCE, False))

    def test_malformed_fields_are_refused(self):
        for fields, words in (({"mbr": "comet"}, "mbr must be one of"),
                              ({"mbr": "chrf", "candidates": 1}, "candidates must be an integer in \\[2"),
                              ({"mbr": "chrf", "candidates_from": "greedy"}, "candidates_from must be one of"),
                              ({"mbr": "chrf", "mbr_aggregate": "yes"}, "mbr_aggregate must be true or false")):
            with self.subTest(fields=fields), self.assertRaisesRegex(DecodingParameterError, words):
                GenerationRequest(**fields)

    def test_mbr_settings_without_mbr_are_refused(self):
        with self.assertRaisesRegex(DecodingParameterError, "--candidates, --mbr-aggregate only apply with --mbr"):
            GenerationRequest(candidates=4, mbr_aggregate=True)

    def test_clashing_fields_are_refused(self):
        for fields, words in (({"num_return": 2, "beam_size": 2}, "one translation per line"),
                              ({"alignments": True}, "alignments"),
                              ({"candidates_from": "beam", "temperature": 0.5}, "temperature only apply to sampled")):
            with self.subTest(fields=fields), self.assertRaisesRegex(DecodingParameterError, words):
                GenerationRequest(mbr="bleu", **fields)

    def test_beam_candidates_are_one_beam_of_n_returning_n(self):
        request = GenerationRequest(mbr="chrf", candidates=5, candidates_from="beam", mbr_aggregate=True)
        candidates = mbr.candidate_request(request)
        self.assertEqual((candidates.beam_size, candidates.num_return, candidates.temperature), (5, 5, 0.0))
        self.assertEqual([getattr(candidates, name) for name in mbr.MBR_FIELDS],
                         [None, mbr.DEFAULT_CANDIDATES, mbr.DEFAULT_SOURCE, False])

    def test_sampled_candidates_default_to_epsilon_sampling_at_temperature_one(self):
        candidates = mbr.candidate_request(GenerationRequest(mbr="chrf", candidates=16, seed=3))
        self.assertEqual((candidates.beam_size, candidates.num_return, candidates.temperature, candidates.seed),
                         (1, 16, 1.0, 3))
        self.assertEqual(candidates.epsilon, 0.02)
        self.assertIsNone(candidates.mbr)

    def test_given_sampling_fields_are_kept(self):
        candidates = mbr.candidate_request(GenerationRequest(mbr="chrf", candidates=4, temperature=0.7, top_p=0.9))
        self.assertEqual((candidates.temperature, candidates.top_p, candidates.epsilon), (0.7, 0.9, 0.0))
        cut_only = mbr.candidate_request(GenerationRequest(mbr="chrf", candidates=4, top_k=5))
        self.assertEqual((cut_only.temperature, cut_only.top_k, cut_only.epsilon), (1.0, 5, 0.0))
        with self.assertRaisesRegex(DecodingParameterError, "top_p"):
            GenerationRequest(mbr="chrf", top_p=5.0)


    def test_the_flags_are_the_fields(self):
        from t2t_keras import cli, cli_arguments

        args = cli_arguments.build_parser().parse_args(
            ["translate", "--run-dir", "r", "--mbr", "bleu", "--candidates", "4", "--candidates-from", "beam",
             "--mbr-aggregate"])
        request = GenerationRequest(**cli._given(args, cli.REQUEST_FLAGS))
        self.assertEqual([getattr(request, name) for name in mbr.MBR_FIELDS], ["bleu", 4, "beam", True])


class FakeArtifact(Artifact):
    """An artifact kind whose search answers fixed candidates and records the requests it was given."""

    kind, path, task, max_length = "run", "fake", "translation", 64

    def __init__(self, candidates, accepts=("beam_size", "alpha", "num_return", "temperature", "top_k", "top_p",
                                             "epsilon", "seed"), max_beam_size=8):
        self.candidates, self.accepts, self.max_beam_size = candidates, frozenset(accepts), max_beam_size
        self.defaults, self.calls = GenerationRequest(beam_size=4), []

    def generate(self, lines, request):
        self.calls.append(request)
        return _generation([self.candidates[line][:request.num_return] for line in lines])


class ArtifactTest(unittest.TestCase):
    """Every kind's `generate` answers MBR requests: one call for the candidates, the choice with its utility."""

    def setUp(self):
        self.artifact = FakeArtifact({"one": AGREEING, "two": ["x", "x y z", "x y z", "x y"]})

    def test_one_generate_call_then_the_choice_with_its_expected_utility(self):
        request = self.artifact.request(mbr="chrf", candidates=3, candidates_from="beam")
        generation = self.artifact.generate(["one", "two"], request)
        self.assertEqual(len(self.artifact.calls), 1)
        self.assertEqual((self.artifact.calls[0].beam_size, self.artifact.calls[0].num_return), (3, 3))
        for line, texts, scores in zip(("one", "two"), generation.texts, generation.scores):
            candidates = self.artifact.candidates[line][:3]
            pairs = fastchrf.pairwise_chrf([candidates], [candidates])[0]
            expected = [np.mean([pairs[i][j] for j in range(3) if j != i]) for i in range(3)]
            best = int(np.argmax(expected))
            self.assertEqual(texts, [candidates[best]])
            self.assertAlmostEqual(scores[0], expected[best], places=9)
        self.assertEqual(generation.texts[1], ["x y z"])

    def test_sampled_candidates_reach_the_search_as_samples(self):
        self.artifact.generate(["two"], self.artifact.request(mbr="bleu", candidates=4, seed=1))
        sampled = self.artifact.calls[0]
        self.assertEqual((sampled.beam_size, sampled.num_return, sampled.temperature, sampled.seed), (1, 4, 1.0, 1))

    def test_a_kind_without_several_outputs_per_line_is_refused_in_one_line(self):
        single = FakeArtifact(self.artifact.candidates, accepts=("beam_size", "alpha"))
        with self.assertRaisesRegex(T2TError, "returns one translation per line") as caught:
            single.request(mbr="chrf", candidates_from="beam")
        self.assertNotIn("\n", str(caught.exception))

    def test_a_kind_that_cannot_sample_is_refused_and_told_of_beam_candidates(self):
        beam_only = FakeArtifact(self.artifact.candidates, accepts=("beam_size", "alpha", "num_return"))
        with self.assertRaisesRegex(T2TError, "cannot sample .*temperature, epsilon.*--candidates-from beam"):
            beam_only.request(mbr="chrf")
        self.assertIsNotNone(beam_only.request(mbr="chrf", candidates_from="beam").mbr)

    def test_a_beam_size_beside_mbr_and_too_many_beam_candidates_are_refused(self):
        with self.assertRaisesRegex(T2TError, "--beam-size does not apply with --mbr"):
            self.artifact.request(mbr="chrf", beam_size=2)
        with self.assertRaisesRegex(T2TError, "beams of at most 8.*give --candidates 8 or fewer"):
            self.artifact.request(mbr="chrf", candidates=9, candidates_from="beam")
        self.assertEqual(self.artifact.calls, [])

    def test_a_quality_estimate_is_of_the_chosen_text_not_of_the_candidates(self):
        estimated = []

        class Estimating(FakeArtifact):
            def with_quality(self, lines, generation, request):
                estimated.append((generation.texts, generation.scores, request.quality))
                return generation

        artifact = Estimating(self.artifact.candidates, accepts=("beam_size", "num_return", "quality", "min_quality"))
        generation = artifact.generate(["two"], artifact.request(mbr="chrf", candidates=3, candidates_from="beam",
                                                                 quality=True))
        self.assertFalse(artifact.calls[0].quality)  # the candidates' search is not asked for it
        self.assertEqual(estimated, [(generation.texts, generation.scores, True)])
        self.assertEqual(generation.texts, [["x y z"]])

    def test_requests_without_mbr_pass_through(self):
        request = self.artifact.request(beam_size=2, num_return=2)
        self.assertEqual(self.artifact.generate(["two"], request).texts, [["x", "x y z"]])
        self.assertEqual(self.artifact.calls, [request])


def _generation(candidates):
    """A `Generation` of one line per list of candidate texts, scored 0."""
    generation = empty_generation(len(candidates), 1)
    return generation._replace(texts=[list(texts) for texts in candidates],
                               scores=[[0.0] * len(texts) for texts in candidates])


class TranslateTest(unittest.TestCase):
    """`t2t-keras translate --mbr` on the tiny run, and the same fields over REST, choose as worked out here."""

    @classmethod
    def setUpClass(cls):
        from tests.roads import roads

        cls.roads = roads()
        cls.lines = cls.roads.sentences.read_text(encoding="utf-8").splitlines()[:4]

    def chosen_by_hand(self, artifact, beam):
        """Per line, the candidate of the highest mean chrF against the others, from `beam`-best lists."""
        nbest = artifact.generate(self.lines, artifact.request(beam_size=beam, num_return=beam)).texts
        chosen = []
        for candidates in nbest:
            pairs = fastchrf.pairwise_chrf([candidates], [candidates])[0]
            means = [np.mean([pairs[i][j] for j in range(beam) if j != i]) for i in range(beam)]
            chosen.append(candidates[int(np.argmax(means))])
        return chosen

    def test_translate_with_mbr_over_beam_candidates(self):
        from t2t_keras.artifacts import open_artifact
        from tests.helpers import cli_in_process

        done = cli_in_process("translate", "--run-dir", self.roads.run_dir, "--mbr", "chrf", "--candidates", 4,
                              "--candidates-from", "beam", stdin="\n".join(self.lines).encode("utf-8") + b"\n")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertEqual(done.stdout.decode("utf-8").splitlines(),
                         self.chosen_by_hand(open_artifact(self.roads.run_dir), 4))

    def test_rest_params_choose_as_translate(self):
        from starlette.testclient import TestClient

        from t2t_keras.artifacts import open_artifact
        from t2t_keras.serving.server import create_app

        artifact = open_artifact(self.roads.ctranslate2)
        expected = self.chosen_by_hand(artifact, 3)
        params = {"mbr": "chrf", "candidates": 3, "candidates_from": "beam"}
        with TestClient(create_app(artifact, max_wait_ms=1)) as client:
            answer = client.post("/v1/models/default:predict", json={"instances": self.lines, "params": params})
            self.assertEqual(answer.status_code, 200, answer.text)
            self.assertEqual([row["translations"] for row in answer.json()["predictions"]], expected)
            refused = client.post("/v1/models/default:predict",
                                  json={"instances": self.lines, "params": dict(params, candidates=1)})
            self.assertEqual(refused.status_code, 400, refused.text)


if __name__ == "__main__":
    unittest.main()
