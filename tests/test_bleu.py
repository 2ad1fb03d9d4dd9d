"""Evaluation scores: sacreBLEU with signature, chrF, and the paper's tokenized BLEU."""

import sacrebleu
import tensorflow as tf

from t2t_keras.errors import DataError
from t2t_keras.evaluation.bleu import score
from tests.helpers import TestCase

REFERENCES = ["Die Katze sitzt auf der Matte.", "Klicken Sie auf die Schaltfläche Drucken-Vorschau."]


class ScoreTest(TestCase):
    def test_perfect_translation(self):
        result = score(REFERENCES, REFERENCES)
        self.assertEqual((result["bleu"], result["chrf"], result["tokenized_bleu"]), (100.0, 100.0, 100.0))
        self.assertEqual(result["sentences"], 2)
        self.assertIn("tok:13a", result["signature"])
        self.assertIn("tok:intl", result["tokenized_bleu_signature"])

    def test_matches_sacrebleu_directly(self):
        hypotheses = ["Die Katze sitzt auf einer Matte.", "Klicken Sie auf Drucken."]
        result = score(hypotheses, REFERENCES)
        self.assertAlmostEqual(result["bleu"], sacrebleu.corpus_bleu(hypotheses, [REFERENCES]).score, places=2)
        self.assertAlmostEqual(result["chrf"], sacrebleu.corpus_chrf(hypotheses, [REFERENCES]).score, places=2)

    def test_tokenized_bleu_splits_hyphenated_compounds(self):
        # The compound is wrong as a whole but half right once split at its hyphen.
        hypotheses = ["Die Katze sitzt auf der Matte.", "Klicken Sie auf die Schaltfläche Drucken-Ansicht."]
        result = score(hypotheses, REFERENCES)
        self.assertGreater(result["tokenized_bleu"], result["bleu"])

    def test_tokenized_bleu_only_for_german(self):
        self.assertNotIn("tokenized_bleu", score(["a b c d"], ["a b c d"], target_lang="fr"))

    def test_mismatched_lengths(self):
        with self.assertRaisesRegex(DataError, "1 translations but 2 references"):
            score(["x"], REFERENCES)


if __name__ == "__main__":
    tf.test.main()
