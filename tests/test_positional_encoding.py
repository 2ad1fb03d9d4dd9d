"""§3.5: sinusoidal positional encoding and the learned alternative of Table 3 (E)."""

import math

import numpy as np
import tensorflow as tf

from t2t_keras.layers import LearnedPositionEmbedding, SinusoidalPositionEncoding
from tests.helpers import TestCase


class SinusoidalPositionEncodingTest(TestCase):
    def test_golden_values_at_known_positions(self):
        layer = SinusoidalPositionEncoding()
        encoding = layer.encoding(3, 4).numpy()
        # PE(pos, 2i) = sin(pos / 10000^(2i/4)), PE(pos, 2i+1) = cos(...): wavelengths 1 and 100.
        self.assertAllClose(encoding[0], [0.0, 1.0, 0.0, 1.0])
        self.assertAllClose(encoding[1], [0.84147098, 0.54030231, 0.00999983, 0.99995])
        self.assertAllClose(encoding[2], [0.90929743, -0.41614684, 0.01999867, 0.99980001])

    def test_matches_the_formula_at_d_model_512(self):
        encoding = SinusoidalPositionEncoding().encoding(101, 512).numpy()
        for pos in (0, 7, 50, 100):
            for i in (0, 1, 63, 255):
                angle = pos / 10000 ** (2 * i / 512)
                self.assertAllClose(encoding[pos, 2 * i], math.sin(angle), atol=1e-4)
                self.assertAllClose(encoding[pos, 2 * i + 1], math.cos(angle), atol=1e-4)

    def test_adds_encoding_from_start_index(self):
        layer = SinusoidalPositionEncoding()
        inputs = np.zeros((2, 3, 8), "float32")
        whole = layer(np.zeros((2, 6, 8), "float32")).numpy()
        shifted = layer(inputs, start_index=3).numpy()
        self.assertAllClose(shifted, whole[:, 3:])

    def test_odd_width(self):
        self.assertEqual(SinusoidalPositionEncoding().encoding(5, 7).shape, (5, 7))


class LearnedPositionEmbeddingTest(TestCase):
    def test_adds_the_rows_of_its_table(self):
        layer = LearnedPositionEmbedding(max_length=10)
        inputs = np.ones((1, 4, 6), "float32")
        outputs = layer(inputs, start_index=2).numpy()
        self.assertAllClose(outputs[0], 1.0 + layer.embeddings.numpy()[2:6])

    def test_rejects_non_positive_length(self):
        with self.assertRaisesRegex(ValueError, "max_length=0"):
            LearnedPositionEmbedding(max_length=0)


if __name__ == "__main__":
    tf.test.main()
