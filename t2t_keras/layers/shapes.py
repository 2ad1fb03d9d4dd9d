"""Reshapes of the last axes that keep the leading ones, in as few graph ops as the backend allows."""

import keras
from keras import ops


def reshape_trailing(x, count, dims, like=None):
    """`x` reshaped to the leading axes of `like` (default `x`), all but its last `count`, followed by `dims`.

    `dims`: the new trailing sizes, Python ints. E.g. heads split off `(batch, length, heads * dim)` with
    `reshape_trailing(x, 1, (heads, dim))`, and merged back with `reshape_trailing(y, 2, (heads * dim,))`.

    On TensorFlow the target shape is one `Shape`, one slice and one concatenation: `ops.shape` would slice out
    every dynamic dimension (three constants each) and pack them again, about three times the ops, on every
    call of every layer of every trace. Static shapes are inferred as before.
    """
    like = x if like is None else like
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # only under TensorFlow: the layers import it nowhere else (cf. layers/dropout.py)

        return tf.reshape(x, tf.concat([tf.shape(like)[:-count], list(dims)], axis=0))
    return ops.reshape(x, (*ops.shape(like)[:-count], *dims))


def rows(x, width=None):
    """`x` `(..., width)` as one `(rows, width)` matrix; `width` (default: the last axis, which must be static)
    may span several trailing axes, e.g. `rows(heads, num_heads * head_dim)` merges the heads.

    A projection of `rows(x)` is a plain matrix product, and `reshape_trailing(out, count, dims, like=x)` gives
    it back its leading axes: one Const and one Reshape in, one shape slice and one Reshape out, instead of a
    reshape on each side of every projection and another to split or merge heads.
    """
    width = x.shape[-1] if width is None else width
    if width is None:
        raise ValueError(f"rows(x) needs a static last axis; got shape {x.shape}. Pass `width`.")
    return ops.reshape(x, (-1, width))
