"""The validation pass and the dev decodes of a training session, outside XLA's per-shape compilations.

With `training.fuse_elementwise` (a bfloat16 graph-mode step on a CPU) auto-clustering is on for the whole of
`train` (`switches.clustering.xla_auto_clustering`), and TensorFlow compiles every cluster of a function once for each
input shape it runs on. The training step pays that once per bucket shape and runs thousands of steps on them;
the validation pass would pay it too, for its own clusters, for a dozen batches an epoch: on `mini`, the first
validation compiled 120 clusters and took 69.6 s where an unclustered pass took 3-5.5 s, back to back on the same
busy machine (docs/results.md). TensorFlow reads the setting when a function is called, not when it is traced
(TF 2.21: a function traced with auto-clustering on runs unclustered when called with it off, and clustered again
when called with it on), so switching it off for the pass keeps validation out of clusters and the training step
in its own. The dev evaluations of `training.eval_every_steps` and the quality curve's decodes run outside it the
same way (`unclustered`).

A training step under XLA (`training.jit_compile`: float32 on a CPU without bfloat16 units, GPUs, TPUs) would take
its validation pass into XLA too, as Keras compiles the test step like the train step, once for each dev batch
shape: on `mini` on a 2-core AVX2 CPU, the 30-minute run's three validations took 32, 64 and 2.5 s. The pass is a
dozen forward batches, so it runs in graph mode instead (`validation_in_graph_mode`), and compiles nothing.
"""

import keras

from t2t_keras.switches.clustering import xla_auto_clustering


class UnclusteredValidation(keras.callbacks.Callback):
    """Auto-clustering off from `on_test_begin` to `on_test_end` (`fit`'s validation pass), as it was after."""

    def __init__(self):
        super().__init__()
        self._scope = None

    def on_test_begin(self, logs=None):
        self._scope = xla_auto_clustering(False)
        self._scope.__enter__()

    def on_test_end(self, logs=None):
        if self._scope is not None:
            self._scope.__exit__(None, None, None)
            self._scope = None


def unclustered(function):
    """`function`, called with auto-clustering off (and the setting as it was after)."""

    def call(*args, **kwargs):
        with xla_auto_clustering(False):
            return function(*args, **kwargs)

    return call


def validation_in_graph_mode(model):
    """`model` (compiled, its fit steps set) with `fit`'s validation pass built in graph mode, without XLA.

    Keras builds the test function once and keeps it until the next `compile`; it is built here with `jit_compile`
    off for the moment, so the training step keeps XLA and the validation compiles no XLA function per dev shape.
    """
    if model.jit_compile:
        model.jit_compile = False
        try:
            model.make_test_function(force=True)
        finally:
            model.jit_compile = True
    return model
