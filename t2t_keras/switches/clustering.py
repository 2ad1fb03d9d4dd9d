"""TensorFlow's auto-clustering, the process-wide switch that `training.fuse_elementwise` needs, scoped to a block.

TensorFlow takes the setting per traced function, when it first runs. `training.compile_model` only records the
choice on the model (`model.fuse_elementwise`); `training.train` turns it on for the training it runs, inside
`xla_auto_clustering`, and the process's own setting comes back when training ends, also on an error. Calling
`model.fit` on a compiled model yourself, wrap it the same way to have the fused step:

    with xla_auto_clustering(model.fuse_elementwise):
        model.fit(...)
"""

import contextlib


@contextlib.contextmanager
def xla_auto_clustering(enabled=None):
    """TensorFlow's auto-clustering on or off (None: as it is) for the functions traced inside the block.

    The setting is process-wide; the process's own setting comes back when the block ends, also on an error.
    Used as a decorator (`@xla_auto_clustering()`), it scopes what the function sets (`set_auto_clustering`).
    """
    import tensorflow as tf

    previous = tf.config.optimizer.get_jit()
    if enabled is not None:
        set_auto_clustering(enabled)
    try:
        yield
    finally:
        tf.config.optimizer.set_jit(previous or False)


def set_auto_clustering(enabled):
    """Turns auto-clustering on or off for the functions traced from now on: call it inside `xla_auto_clustering`."""
    import tensorflow as tf

    tf.config.optimizer.set_jit("autoclustering" if enabled else False)
