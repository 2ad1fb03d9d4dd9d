"""Dropout with 16-bit masks: drops `rate` of the elements (§5.4, P_drop), keeps the expectation, is reproducible."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.layers import Dropout
from t2t_keras.layers.tf_dropout import drop_threshold, dropout16
from tests.helpers import TestCase


class DropoutTest(TestCase):
    def test_drops_the_rate_and_scales_the_rest(self):
        x = tf.ones([256, 64, 32])
        for rate in (0.1, 0.3):
            y = dropout16(x, rate, tf.constant([3, 4])).numpy()
            dropped = np.mean(y == 0)
            self.assertAllClose(dropped, rate, atol=3e-3)  # 524,288 draws: σ ≈ 4e-4
            kept = y[y != 0]
            self.assertAllClose(kept, np.full_like(kept, 65536 / (65536 - drop_threshold(rate))))
            self.assertAllClose(y.mean(), 1.0, atol=5e-3)  # the expectation is the input

    def test_the_rate_rounds_to_a_16_bit_level(self):
        self.assertEqual(drop_threshold(0.1), 6554)  # 0.100006
        self.assertEqual(drop_threshold(1e-9), 1)
        self.assertEqual(drop_threshold(0.999999999), 65535)

    def test_masks_are_uncorrelated_along_the_flattened_tensor(self):
        y = dropout16(tf.ones([1 << 18]), 0.5, tf.constant([1, 2])).numpy() == 0
        pairs = np.mean(y[:-1] & y[1:])  # neighbours come from the two halves of one 32-bit word
        self.assertAllClose(pairs, 0.25, atol=5e-3)

    def test_same_seed_same_mask_and_the_layer_advances_its_seed(self):
        x = tf.random.normal([4, 8, 16])
        self.assertAllEqual(dropout16(x, 0.1, tf.constant([5, 6])), dropout16(x, 0.1, tf.constant([5, 6])))
        layer = Dropout(0.1, seed=7)
        first, second = layer(x, training=True), layer(x, training=True)
        self.assertNotAllEqual(first, second)
        self.assertAllEqual(Dropout(0.1, seed=7)(x, training=True), first)

    def test_identity_at_inference_and_in_bfloat16_and_under_xla(self):
        x = tf.random.normal([4, 8, 16])
        self.assertAllEqual(Dropout(0.1)(x, training=False), x)
        layer = Dropout(0.1, seed=1, dtype="mixed_bfloat16")
        y = layer(x, training=True)
        self.assertEqual(y.dtype, tf.bfloat16)
        compiled = tf.function(lambda x: dropout16(x, 0.1, tf.constant([1, 1])), jit_compile=True)(x).numpy()
        self.assertAllClose(np.mean(compiled == 0), 0.1, atol=0.05)
        self.assertAllClose(compiled[compiled != 0], x.numpy()[compiled != 0] / (1 - 6554 / 65536), rtol=1e-6)

    def test_serializes(self):
        layer = Dropout(0.2, seed=3, name="d")
        restored = keras.layers.deserialize(keras.layers.serialize(layer))
        self.assertIsInstance(restored, Dropout)
        self.assertEqual((restored.rate, restored.seed), (0.2, 3))


if __name__ == "__main__":
    tf.test.main()
