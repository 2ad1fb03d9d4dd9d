"""`layers.Dense`: Keras' Dense with rank > 2 inputs multiplied as one matrix product: same numbers, fewer ops."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras import layers
from t2t_keras.layers.dense import project
from tests.helpers import TestCase


def twins(units, input_dim, **kwargs):
    """A `layers.Dense` and a `keras.layers.Dense` with the same weights."""
    ours, theirs = layers.Dense(units, **kwargs), keras.layers.Dense(units, **kwargs)
    ours.build((None, input_dim))
    theirs.build((None, input_dim))
    theirs.set_weights(ours.get_weights())
    return ours, theirs


def op_types(function, spec):
    return [op.type for op in tf.function(function).get_concrete_function(spec).graph.get_operations()]


class DenseTest(TestCase):
    def test_outputs_equal_keras_dense_exactly_for_every_rank(self):
        ours, theirs = twins(5, 8, activation="relu")
        rng = np.random.default_rng(0)
        for shape in ((4, 8), (2, 3, 8), (2, 3, 4, 8)):
            x = rng.normal(size=shape).astype("float32")
            self.assertAllEqual(ours(x), theirs(x))

    def test_dynamic_shapes_in_a_graph_equal_keras_dense(self):
        ours, theirs = twins(5, 8)
        spec = tf.TensorSpec([None, None, 8], tf.float32)
        x = np.random.default_rng(1).normal(size=(3, 7, 8)).astype("float32")
        got = tf.function(ours, input_signature=[spec])(x)
        self.assertEqual(got.shape, (3, 7, 5))
        self.assertAllEqual(got, theirs(x))

    def test_a_rank_3_call_is_one_matmul_without_tensordot_bookkeeping(self):
        ours, theirs = twins(5, 8)
        spec = tf.TensorSpec([None, None, 8], tf.float32)
        ours_ops, theirs_ops = op_types(ours, spec), op_types(theirs, spec)
        self.assertEqual(ours_ops.count("MatMul"), 1)
        for bookkeeping in ("GatherV2", "Prod", "Transpose"):  # tf.tensordot's shape arithmetic
            self.assertIn(bookkeeping, theirs_ops)
            self.assertNotIn(bookkeeping, ours_ops)
        self.assertLess(len(ours_ops), len(theirs_ops))

    def test_project_multiplies_the_last_axis(self):
        x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype("float32")
        kernel = np.random.default_rng(3).normal(size=(4, 6)).astype("float32")
        self.assertAllClose(project(x, kernel), np.einsum("bti,io->bto", x, kernel), atol=1e-5)

    def test_lora_adapter_is_part_of_the_product(self):
        ours, theirs = twins(5, 8)
        for layer in (ours, theirs):
            layer.enable_lora(2)
            layer.lora_kernel_b.assign(np.full((2, 5), 0.5, "float32"))
        theirs.lora_kernel_a.assign(ours.lora_kernel_a)
        x = np.random.default_rng(4).normal(size=(2, 3, 8)).astype("float32")
        self.assertAllEqual(ours(x), theirs(x))
        self.assertNotAllClose(ours(x), ours.bias + x @ ours._kernel.numpy())  # the adapter counts

    def test_mixed_precision_computes_in_bfloat16(self):
        layer = layers.Dense(5, dtype="mixed_bfloat16")
        out = layer(np.ones((2, 3, 8), "float32"))
        self.assertEqual(out.dtype, tf.bfloat16)
        self.assertEqual(out.shape, (2, 3, 5))

    def test_int8_quantization_is_keras_own(self):
        ours, theirs = twins(5, 8)
        for layer in (ours, theirs):
            layer.quantize("int8")
        self.assertEqual(ours.quantization_mode, "int8")
        self.assertEqual(ours._kernel.dtype, "int8")
        x = np.random.default_rng(5).normal(size=(2, 3, 8)).astype("float32")
        self.assertAllEqual(ours(x), theirs(x))
