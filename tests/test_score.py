"""Forced decoding (`score`): equal to an independent teacher-forced computation; ranks n-best lists as the search."""

import pathlib
import tempfile

import numpy as np

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.decoding import beam_search, length_penalty
from t2t_keras.decoding.forced import token_nll
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import DataError
from t2t_keras.evaluation.scoring import ScorePair, format_score, read_score_pairs, read_tab_separated_pairs
from t2t_keras.export.saved_model import export_translator
from tests.helpers import TestCase, padded_ids, toy_pairs, toy_translation


def numpy_nll(model, source_rows, target_rows):
    """Per-pair token NLLs from the model's logits with a numpy log-softmax (BOS fed, EOS scored)."""
    width = max(len(r) for r in target_rows) + 1
    source = padded_ids(source_rows, max(len(r) for r in source_rows))
    logits = model((source, padded_ids([[2] + r for r in target_rows], width)), training=False).numpy()
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return [-log_probs[i, np.arange(len(r) + 1), r + [3]] for i, r in enumerate(target_rows)]


class ScoreTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        cls.tokenizer, cls.pieces, _, cls.model = toy_translation()
        cls.export = SavedModelArtifact(export_translator(cls.model, cls.tokenizer, root / "export", max_beam_size=3,
                                                            request=GenerationRequest(beam_size=3)))
        cls.pairs = toy_pairs(9, seed=5) + [("the cat", "die Katze Katze Katze")]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def encode(self, sentences):
        return [self.pieces.encode(s) for s in sentences]

    def test_saved_model_score_equals_numpy_teacher_forcing(self):
        sources, targets = [s for s, _ in self.pairs], [t for _, t in self.pairs]
        expected = numpy_nll(self.model, [r + [3] for r in self.encode(sources)], self.encode(targets))
        sums, per_token = self.export._score_batch(sources, targets)
        for got_sum, got_tokens, want in zip(sums, per_token, expected):
            self.assertAllClose(got_tokens, want, atol=1e-4)
            self.assertAllClose(got_sum, want.sum(), atol=1e-3)

    def test_batched_by_length_in_input_order(self):
        """Tiny batches force several length-sorted batches; results still follow the input order."""
        pairs = read_pairs(self, self.pairs, self.export)
        scores = self.export.score(pairs, batch_tokens=8 * 8)
        expected = numpy_nll(self.model, [r + [3] for r in self.encode([s for s, _ in self.pairs])],
                             self.encode([t for _, t in self.pairs]))
        self.assertAllClose([s.nll for s in scores], [e.sum() for e in expected], atol=1e-3)
        self.assertEqual([len(s.token_nll) for s in scores], [len(e) for e in expected])
        line = format_score(scores[0], token_level=True)
        self.assertEqual(len(line.split("\t")), 3)
        self.assertEqual(len(line.split("\t")[2].split()), len(expected[0]))

    def test_beam_search_nbest_ranks_as_their_scores(self):
        """Beam search's log-probabilities are the negative scores; normalising them gives the n-best order."""
        sources = [r + [3] for r in self.encode([s for s, _ in self.pairs])]
        source = padded_ids(sources, max(len(r) for r in sources))
        out = beam_search(self.model, source, beam_size=4, num_return=4, alpha=0.6, max_extra_length=20)
        for row in range(len(sources)):
            hypotheses = [[int(t) for t in h if t != 0] for h in out["tokens"][row].numpy()]
            target_in = padded_ids([[2] + h[:-1] for h in hypotheses], max(map(len, hypotheses)))
            target_out = padded_ids(hypotheses, max(map(len, hypotheses)))
            nll = token_nll(self.model, np.repeat(source[row:row + 1], 4, axis=0), target_in, target_out)
            nll = nll.numpy().sum(axis=1)
            self.assertAllClose(-nll, out["log_probs"][row], atol=1e-3)
            normalised = -nll / length_penalty([len(h) for h in hypotheses], 0.6).numpy()
            self.assertEqual(list(np.argsort(-normalised, kind="stable")), [0, 1, 2, 3])

    def test_saved_model_nbest_ranks_as_score(self):
        sources = [s for s, _ in self.pairs]
        predicted = self.export.generate(sources, self.export.request(beam_size=3, alpha=0.6, num_return=3))
        for source, nbest, scores in zip(sources, predicted.texts, predicted.scores):
            sums, per_token = self.export._score_batch([source] * 3, nbest)
            normalised = -sums / length_penalty([len(t) for t in per_token], 0.6).numpy()
            self.assertAllClose(normalised, scores, atol=1e-3)
            self.assertEqual(list(np.argsort(-normalised, kind="stable")), [0, 1, 2])


def read_pairs(test, pairs, scorer):
    with tempfile.TemporaryDirectory() as tmp:
        source, target = write_pair_files(tmp, [s for s, _ in pairs], [t for _, t in pairs])
        return read_score_pairs(source, target, scorer.max_length, scorer.piece_lengths)


def write_pair_files(directory, sources, targets, raw_target=None):
    source, target = pathlib.Path(directory) / "src.en", pathlib.Path(directory) / "tgt.de"
    source.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    target.write_bytes(raw_target if raw_target is not None else "".join(t + "\n" for t in targets).encode())
    return source, target


class ReadPairsTest(TestCase):
    """The same clear errors as training data: file, line and fix."""

    def read(self, sources, targets, raw_target=None, max_length=10):
        with tempfile.TemporaryDirectory() as tmp:
            source, target = write_pair_files(tmp, sources, targets, raw_target)
            return read_score_pairs(source, target, max_length, lambda lines: [len(line.split()) for line in lines])

    def test_good_pairs_keep_order_and_lines(self):
        pairs = self.read(["a b", "c"], ["x", "y z"])
        self.assertEqual(pairs, [ScorePair(1, "a b", "x", 2, 1), ScorePair(2, "c", "y z", 1, 2)])

    def test_errors(self):
        cases = (
            ((["a", "b"], ["x"]), "has 2 lines but .* has 1: parallel files must be aligned"),
            ((["a", ""], ["x", "y"]), r"src.en:2 is empty"),
            ((["a", "b"], ["x", " "]), r"tgt.de:2 is empty"),
            ((["a", "b"], None, b"x\n\xff\n"), r"tgt.de:2 is not valid UTF-8"),
            ((["a", " ".join("w" * 1 for _ in range(10))], ["x", "y"]), r"src.en:2 has 10 pieces; the model "
                                                                        r"accepts at most 9"),
        )
        for args, pattern in cases:
            with self.subTest(pattern):
                with self.assertRaisesRegex(DataError, pattern):
                    self.read(*args)


class ReadTabSeparatedPairsTest(TestCase):
    """SOURCE<TAB>TARGET lines (stdin) give the pairs two files give, with the same errors naming the line."""

    @staticmethod
    def read(data, max_length=10):
        return read_tab_separated_pairs(data, "<stdin>", max_length, lambda lines: [len(x.split()) for x in lines])

    def test_the_pairs_of_two_files(self):
        self.assertEqual(self.read(b"a b\tx\nc\ty z\n"),
                         [ScorePair(1, "a b", "x", 2, 1), ScorePair(2, "c", "y z", 1, 2)])

    def test_errors(self):
        cases = ((b"", "<stdin> is empty: expected one SOURCE<TAB>TARGET pair"),
                 (b"a\tx\nb x\n", r"<stdin>:2 has 1 tab-separated fields; expected two"),
                 (b"a\tx\tz\n", r"<stdin>:1 has 3 tab-separated fields"),
                 (b"a\tx\n\ty\n", r"<stdin>:2 is empty: every pair needs a source and a translation"),
                 (b"a\t\xff\n", r"<stdin>:1 is not valid UTF-8"),
                 (b"a\t" + b"w " * 10 + b"\n", r"<stdin>:1 has 10 pieces; the model accepts at most 9"))
        for data, pattern in cases:
            with self.subTest(pattern):
                with self.assertRaisesRegex(DataError, pattern):
                    self.read(data)


if __name__ == "__main__":
    import unittest

    unittest.main()
