"""`layers.LayerNormalization`: Keras' LayerNorm (Ba et al., 2016), the same numbers without reshaping its weights."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras import layers
from tests.helpers import TestCase


def twins(width, **kwargs):
    """A `layers.LayerNormalization` and a `keras.layers.LayerNormalization` with the same (non-trivial) weights."""
    ours, theirs = layers.LayerNormalization(**kwargs), keras.layers.LayerNormalization(**kwargs)
    ours.build((None, None, width))
    theirs.build((None, None, width))
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=w.shape).astype("float32") for w in ours.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


class LayerNormalizationTest(TestCase):
    def test_outputs_equal_keras_layer_norm_exactly(self):
        ours, theirs = twins(8, epsilon=1e-6)
        x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32") * 3 + 1
        self.assertAllEqual(ours(x), theirs(x))

    def test_dynamic_shapes_in_a_graph_and_gradients_equal_keras_layer_norm(self):
        ours, theirs = twins(8, epsilon=1e-6)
        x = tf.constant(np.random.default_rng(2).normal(size=(3, 7, 8)).astype("float32"))

        def value_and_gradients(layer):
            @tf.function(input_signature=[tf.TensorSpec([None, None, 8], tf.float32)])
            def step(inputs):
                with tf.GradientTape() as tape:
                    tape.watch(inputs)
                    out = layer(inputs)
                    loss = tf.reduce_sum(out * tf.range(8, dtype=tf.float32))
                return [out] + tape.gradient(loss, [inputs] + layer.trainable_variables)

            return step(x)

        for got, expected in zip(value_and_gradients(ours), value_and_gradients(theirs)):
            self.assertAllEqual(got, expected)

    def test_the_weights_are_not_reshaped_in_the_graph(self):
        ours, theirs = twins(8)
        spec = tf.TensorSpec([None, None, 8], tf.float32)
        count = [[op.type for op in tf.function(layer).get_concrete_function(spec).graph.get_operations()].count(
            "Reshape") for layer in (ours, theirs)]
        self.assertEqual(count, [0, 2])  # Keras reshapes gamma and beta to (1, 1, 8) on every call

    def test_bfloat16_policy_normalizes_in_float32_and_returns_bfloat16(self):
        ours, theirs = twins(8, dtype="mixed_bfloat16")
        x = np.random.default_rng(3).normal(size=(2, 4, 8)).astype("float32")
        got = ours(x)
        self.assertEqual(keras.backend.standardize_dtype(got.dtype), "bfloat16")
        self.assertAllEqual(tf.cast(got, tf.float32), tf.cast(theirs(x), tf.float32))
