"""The validation pass and the dev decodes of a training session, outside TensorFlow's auto-clustering.

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
