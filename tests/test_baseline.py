"""The retrieval baseline returns the target of the most similar training source."""

import tensorflow as tf

from t2t_keras.evaluation.baseline import RetrievalBaseline
from tests.helpers import TestCase

TRAIN = [
    ("Click the Print button.", "Klicken Sie auf die Schaltfläche Drucken."),
    ("Choose Format - Cells.", "Wählen Sie Format - Zellen."),
    ("The cat sleeps on the mat.", "Die Katze schläft auf der Matte."),
]


class RetrievalBaselineTest(TestCase):
    def test_nearest_source_wins(self):
        translator = RetrievalBaseline(TRAIN)
        outputs = translator.nearest_targets(["Click the Save button.", "Choose Format - Rows.", "A cat on a mat."])
        self.assertEqual(outputs, [TRAIN[0][1], TRAIN[1][1], TRAIN[2][1]])

    def test_exact_match_returns_its_own_target(self):
        translator = RetrievalBaseline(TRAIN)
        self.assertEqual(translator.nearest_targets([s for s, _ in TRAIN], batch_size=2), [t for _, t in TRAIN])


if __name__ == "__main__":
    tf.test.main()
