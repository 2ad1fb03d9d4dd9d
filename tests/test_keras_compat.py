"""The private Keras API behind `t2t_keras.keras_compat` is still there, with the shape the package uses.

Each check fails with a message naming the private name, the `keras_compat` function that uses it and why, so a
Keras upgrade that changes one says where to look.
"""

import gc
import inspect

import keras
import numpy as np
import tensorflow as tf

from t2t_keras import keras_compat
from tests.helpers import TestCase


def compiled_model():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model


class KerasCompatTest(TestCase):
    def require(self, condition, private_name, function, purpose):
        self.assertTrue(condition, f"Keras {keras.__version__} no longer has {private_name} (used by "
                                   f"keras_compat.{function} {purpose}): update keras_compat")

    def test_loss_tracker(self):
        model = compiled_model()
        tracker = getattr(model, "_loss_tracker", None)
        self.require(isinstance(tracker, keras.metrics.Mean) and tracker.name == "loss", "model._loss_tracker",
                     "loss_tracker", "to log the loss of the accumulating train step")
        self.assertIs(keras_compat.loss_tracker(model), tracker)

    def test_unscale_loss_for_distribution(self):
        try:
            from keras.src.losses.loss import unscale_loss_for_distribution
        except ImportError:
            unscale_loss_for_distribution = None
        self.require(callable(unscale_loss_for_distribution), "keras.src.losses.loss.unscale_loss_for_distribution",
                     "unscale_loss_for_distribution", "to log the accumulated loss as Keras logs its own")
        self.assertAllClose(keras_compat.unscale_loss_for_distribution(tf.constant(1.5)), 1.5)  # one replica

    def test_compiled_loss_and_metrics(self):
        model = compiled_model()
        found = [getattr(model, name, "missing") for name in ("_compile_loss", "_compile_metrics")]
        self.require(all(hasattr(c, "built") for c in found), "model._compile_loss / model._compile_metrics with "
                     "`.built`", "compiled_loss_and_metrics", "to skip the multi-worker symbolic build")
        self.assertEqual(list(keras_compat.compiled_loss_and_metrics(model)), found)

    def test_skip_symbolic_build(self):
        model = compiled_model()
        build = getattr(model, "_maybe_symbolic_build", None)
        parameters = list(inspect.signature(build).parameters) if callable(build) else []
        self.require(parameters == ["iterator", "data_batch"], "model._maybe_symbolic_build(iterator, data_batch)",
                     "skip_symbolic_build", "to skip the multi-worker symbolic build")
        calls = []
        object.__setattr__(model, "_maybe_symbolic_build", lambda iterator=None, data_batch=None: calls.append(1))
        keras_compat.skip_symbolic_build(model, lambda: len(calls) > 0)
        x, y = np.ones((4, 3), "float32"), np.ones((4, 2), "float32")
        model.fit(x, y, verbose=0)
        model.fit(x, y, verbose=0)
        self.assertEqual(calls, [1])  # the first fit's call went through, the second's was skipped

    def test_adam_slots(self):
        optimizer = keras.optimizers.Adam()
        variable = keras.Variable(np.zeros((2, 3), "float32"))
        optimizer.build([variable])
        found = all(hasattr(optimizer, name) for name in ("_get_variable_index", "_momentums", "_velocities"))
        self.require(found, "Adam._get_variable_index / _momentums / _velocities", "adam_slots",
                     "to read Adam's moments in FusedAdam")
        m, v = keras_compat.adam_slots(optimizer, variable)
        self.assertEqual((tuple(m.shape), tuple(v.shape)), ((2, 3), (2, 3)))
        self.assertIsNot(m, v)

    def test_replace_layer(self):
        model = compiled_model()
        tracker, layers = getattr(model, "_tracker", None), getattr(model, "_layers", None)
        self.require(hasattr(tracker, "lock") and hasattr(tracker, "unlock") and isinstance(layers, list),
                     "layer._tracker.lock/unlock and layer._layers", "replace_layer",
                     "to swap the int8 embedding into a quantized model")
        old = model.get_layer("dense")
        new = keras.layers.Dense(2, name="int8_stand_in")
        new.build((None, 3))
        keras_compat.replace_layer(model, old, new, ["stand_in"])
        self.assertIs(model.stand_in, new)
        self.assertNotIn(old, model._layers)
        self.assertIn(new, model._layers)

    def test_sublayers(self):
        inner = keras.layers.Dense(2, name="inner")
        outer = keras.Sequential([keras.Input((3,)), keras.Sequential([inner], name="nested")])
        self.require(hasattr(outer, "_flatten_layers"), "layer._flatten_layers", "sublayers",
                     "to find the projections that adapters go on")
        self.assertIn(inner, keras_compat.sublayers(outer))
        self.assertNotIn(outer, keras_compat.sublayers(outer))

    def test_base_kernel(self):
        dense = keras.layers.Dense(2)
        dense.build((None, 3))
        dense.enable_lora(1)
        kernel = getattr(dense, "_kernel", None)
        self.require(isinstance(kernel, keras.Variable) and kernel.shape == (3, 2) and not kernel.trainable,
                     "Dense._kernel", "base_kernel", "to merge an adapter into the kernel variable")
        self.assertIs(keras_compat.base_kernel(dense), kernel)

    def test_one_garbage_collection(self):
        source = inspect.getsource(keras.layers.Layer.__delattr__)
        self.require("gc.collect()" in source, "a gc.collect() in Layer.__delattr__", "one_garbage_collection",
                     "which saves one collection per deleted variable while quantizing; without it the workaround "
                     "is not needed")
        collect = gc.collect
        with self.assertRaisesRegex(RuntimeError, "inside"):
            with keras_compat.one_garbage_collection():
                self.assertIsNot(gc.collect, collect)
                self.assertEqual(gc.collect(), 0)
                raise RuntimeError("inside")
        self.assertIs(gc.collect, collect)  # restored, also on an error

    def test_maybe_merge_call(self):
        interim = getattr(getattr(getattr(tf, "__internal__", None), "distribute", None), "interim", None)
        self.require(callable(getattr(interim, "maybe_merge_call", None)),
                     "tf.__internal__.distribute.interim.maybe_merge_call", "maybe_merge_call",
                     "to skip a diverging update under tf.distribute (training/guard.py)")
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])  # synchronises through merge_call on a CPU

        @tf.function
        def step():
            def fn(given, value):
                self.assertIs(given, strategy)
                self.assertTrue(tf.distribute.in_cross_replica_context())
                return given.experimental_local_results(value)[0] + 1.0

            return keras_compat.maybe_merge_call(fn, tf.distribute.get_strategy(), tf.constant(1.0))

        self.assertEqual(float(strategy.experimental_local_results(strategy.run(step))[0]), 2.0)


if __name__ == "__main__":
    tf.test.main()
