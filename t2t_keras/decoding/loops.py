"""The loops that run a search's step: one over fixed shapes on every backend, two over a growing cache.

* `search_loop` with `growing=False`: `keras.ops.while_loop` over a state whose shapes never change (the
  preallocated cache): `tf.while_loop` on TensorFlow (and inside XLA and LiteRT), `jax.lax.while_loop` on JAX,
  a Python loop on PyTorch.
* `search_loop` with `growing=True` (TensorFlow, graph mode): the self-attention keys/values grow by one position
  a step (`common.new_cache`), so the loop's shape invariants leave that axis open.
* `compaction.compacting_loop` (TensorFlow, graph mode): a growing cache, and the done sentences leave the batch.

A search's step function is the same for all three (`greedy`, `beam_search`).
"""

from keras import ops


def search_loop(step, state, done, bound, growing=False):
    """Runs `state = step(state)` until every sentence is done, at most `bound` times.

    `state` is a dict of tensors whose shapes stay the same from step to step, except, with `growing`, the
    self-attention keys/values of `state["cache"]`, whose length axis grows; its bool `(batch,)` entry
    `state[done]` marks the sentences that are done.
    """
    if growing:
        return _growing_loop(step, state, done, bound)
    (state,) = ops.while_loop(lambda state: ops.logical_not(ops.all(state[done])), lambda state: (step(state),),
                              (state,), maximum_iterations=bound)
    return state


def _growing_loop(step, state, done, bound):
    """`search_loop` over a growing cache: `tf.while_loop` with the keys'/values' length axis left open."""
    import tensorflow as tf  # a growing cache is TensorFlow's graph mode

    shapes = tf.nest.map_structure(lambda tensor: tensor.shape, state)

    def open_length(shape):
        return tf.TensorShape([shape[0], shape[1], None, shape[3]])

    shapes["cache"] = [{**layer, "self": tf.nest.map_structure(open_length, layer["self"])}
                       for layer in shapes["cache"]]
    (state,) = tf.while_loop(lambda state: tf.logical_not(tf.reduce_all(state[done])), lambda state: (step(state),),
                             (state,), maximum_iterations=bound, shape_invariants=(shapes,))
    return state
