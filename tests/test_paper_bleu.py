"""The paper's BLEU (`evaluate --bleu paper`): Moses tokenization, compounds split at hyphens, multi-bleu.perl.

multi-bleu.perl's figures are worked out here two ways the package does not use: n-grams counted by hand in a
tiny example, and `reference_multi_bleu`, the script's formula written out again in the test, line by line as
the perl script computes it (string keys "n w1 w2 ...", clipped counts, the closest reference length, log 0 as
-9999999999).
"""

import math
import unittest

from t2t_keras.errors import DataError, T2TError
from t2t_keras.evaluation.bleu import format_scores, score
from t2t_keras.evaluation.evaluate_run import evaluate_command
from t2t_keras.evaluation.paper_bleu import multi_bleu, paper_bleu, paper_tokenize, split_compounds


def reference_multi_bleu(hypotheses, references):
    """`(bleu, precisions, bp)` as multi-bleu.perl computes them (in %), one reference a line."""
    correct, total = {n: 0 for n in range(1, 5)}, {n: 0 for n in range(1, 5)}
    hypothesis_length = reference_length = 0
    for hypothesis, reference in zip(hypotheses, references):
        words, reference_words = hypothesis.split(), reference.split()
        reference_ngrams = {}
        for n in range(1, 5):
            for start in range(len(reference_words) - n + 1):
                key = " ".join([str(n)] + reference_words[start:start + n])
                reference_ngrams[key] = reference_ngrams.get(key, 0) + 1
        hypothesis_length += len(words)
        reference_length += len(reference_words)
        for n in range(1, 5):
            counts = {}
            for start in range(len(words) - n + 1):
                key = " ".join([str(n)] + words[start:start + n])
                counts[key] = counts.get(key, 0) + 1
            for key, count in counts.items():
                total[n] += count
                correct[n] += min(count, reference_ngrams.get(key, 0))
    precisions = [correct[n] / total[n] if total[n] else 0 for n in range(1, 5)]
    bp = math.exp(1 - reference_length / hypothesis_length) if hypothesis_length < reference_length else 1
    logs = [math.log(p) if p else -9999999999 for p in precisions]
    return 100 * bp * math.exp(sum(logs) / 4), [100 * p for p in precisions], bp


class MultiBleuTest(unittest.TestCase):
    def test_counted_by_hand(self):
        # a b c d e against a b c d f: 4/5 unigrams, 3/4 bigrams, 2/3 trigrams, 1/2 four-grams, equal lengths
        result = multi_bleu(["a b c d e"], ["a b c d f"])
        self.assertAlmostEqual(result.score, 100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, places=10)
        self.assertEqual(result.brevity_penalty, 1.0)
        self.assertEqual(str(result), "BLEU = 66.87, 80.0/75.0/66.7/50.0 (BP=1.000, ratio=1.000, hyp_len=5, "
                                      "ref_len=5)")

    def test_clipping_and_brevity_penalty_counted_by_hand(self):
        # "the the the the" against "the cat the mat on": "the" is clipped at 2 of 4, no bigram matches -> BLEU 0;
        # adding an exact sentence gives every order a match: p1 = (2+6)/(4+6), p2 = 5/(3+5), p3 = 4/(2+4),
        # p4 = 3/(1+3); c = 10 < r = 11 -> BP = exp(1 - 11/10)
        hypotheses = ["the the the the", "a b c d e f"]
        references = ["the cat the mat on", "a b c d e f"]
        result = multi_bleu(hypotheses, references)
        expected = math.exp(1 - 11 / 10) * (8 / 10 * 5 / 8 * 4 / 6 * 3 / 4) ** 0.25
        self.assertAlmostEqual(result.score, 100 * expected, places=10)
        self.assertAlmostEqual(result.brevity_penalty, math.exp(-0.1), places=12)
        self.assertEqual((result.hypothesis_length, result.reference_length), (10, 11))
        self.assertEqual(multi_bleu(hypotheses[:1], references[:1]).score, 0.0)

    def test_a_zero_count_makes_bleu_zero(self):
        result = multi_bleu(["a b c"], ["a b c d"])  # no four-gram in the hypothesis at all
        self.assertEqual(result.score, 0.0)
        self.assertEqual(result.precisions, (100.0, 100.0, 100.0, 0.0))
        self.assertEqual(str(result), "BLEU = 0.00, 100.0/100.0/100.0/0.0 (BP=0.717, ratio=0.750, hyp_len=3, "
                                      "ref_len=4)")

    def test_equals_the_scripts_formula_on_a_corpus(self):
        references = ["die Katze sitzt auf der Matte .", "klicken Sie auf die Schaltfläche Drucken ##AT##-##AT## "
                      "Vorschau .", "wählen Sie Format - Zellen und dann die Registerkarte Schrift .",
                      "das ist ein Test , ein kleiner Test ."]
        hypotheses = ["die Katze sitzt auf einer Matte .", "klicken Sie auf Drucken ##AT##-##AT## Vorschau .",
                      "wählen Sie Format - Zellen , dann Schrift .", "das ist ein Test ein Test ein Test ."]
        result = multi_bleu(hypotheses, references)
        bleu, precisions, bp = reference_multi_bleu(hypotheses, references)
        self.assertAlmostEqual(result.score, bleu, places=9)
        self.assertEqual(len(result.precisions), 4)
        for got, expected in zip(result.precisions, precisions):
            self.assertAlmostEqual(got, expected, places=9)
        self.assertAlmostEqual(result.brevity_penalty, bp, places=12)
        self.assertGreater(result.score, 0.0)

    def test_empty_references_are_refused(self):
        with self.assertRaisesRegex(DataError, "references hold no token"):
            multi_bleu([""], [""])


class PaperTokenizationTest(unittest.TestCase):
    def test_compounds_split_as_get_ende_bleu_splits_them(self):
        self.assertEqual(split_compounds("rich-text format"), "rich ##AT##-##AT## text format")
        # perl's s{(\S)-(\S)}{...}g matches left to right without overlap: the "b" of a-b-c is taken by the first
        # match, so the second hyphen stays; a hyphen between spaces is no compound
        self.assertEqual(split_compounds("a-b-c"), "a ##AT##-##AT## b-c")
        self.assertEqual(split_compounds("Format - Zellen"), "Format - Zellen")

    def test_moses_tokenization_then_compound_splitting(self):
        self.assertEqual(paper_tokenize('Wählen Sie die Rich-Text-Ansicht, dann "OK".'),
                         'Wählen Sie die Rich ##AT##-##AT## Text ##AT##-##AT## Ansicht , dann " OK " .')

    def test_score_of_detokenized_text(self):
        hypotheses = ["Klicken Sie auf die Drucken-Vorschau.", "Die Katze sitzt auf der Matte."]
        references = ["Klicken Sie auf die Drucken-Ansicht.", "Die Katze sitzt auf der Matte."]
        result, protocol = paper_bleu(hypotheses, references)
        tokenized = ([paper_tokenize(line) for line in hypotheses], [paper_tokenize(line) for line in references])
        self.assertAlmostEqual(result.score, reference_multi_bleu(*tokenized)[0], places=9)
        self.assertIn("multi-bleu.perl", protocol)


class EvaluateProtocolTest(unittest.TestCase):
    HYPOTHESES = ["Klicken Sie auf die Drucken-Vorschau.", "Die Katze sitzt auf der Matte."]
    REFERENCES = ["Klicken Sie auf die Drucken-Ansicht.", "Die Katze sitzt auf der Matte."]

    def test_the_default_output_is_unchanged(self):
        result = score(self.HYPOTHESES, self.REFERENCES)
        self.assertIn("tokenized_bleu", result)
        self.assertNotIn("paper_bleu", result)

    def test_paper_bleu_beside_sacrebleu(self):
        result = score(self.HYPOTHESES, self.REFERENCES, bleu="paper")
        expected, _ = paper_bleu(self.HYPOTHESES, self.REFERENCES)
        self.assertEqual(result["paper_bleu"], round(expected.score, 2))
        self.assertEqual(result["bleu"], score(self.HYPOTHESES, self.REFERENCES)["bleu"])
        self.assertNotIn("tokenized_bleu", result)
        printed = format_scores(result)
        self.assertIn(f"paper BLEU {result['paper_bleu']:.2f}", printed)
        self.assertIn("BLEU = ", printed)  # multi-bleu.perl's own line
        self.assertIn("tok:13a", printed)  # beside sacreBLEU and its signature

    def test_an_lm_run_refuses_the_flag(self):
        language_model = type("Artifact", (), {"task": "lm"})()
        with self.assertRaisesRegex(T2TError, "--bleu does not apply to an lm or mlm run"):
            evaluate_command(language_model, "runs/lm", bleu="paper")

    def test_an_unknown_protocol_is_refused(self):
        with self.assertRaisesRegex(DataError, "bleu must be one of"):
            score(self.HYPOTHESES, self.REFERENCES, bleu="moses")


if __name__ == "__main__":
    unittest.main()
