"""TensorFlow's dropout with 16 random bits per element (`dropout16`): `Dropout`'s mask on the TensorFlow backend.

Only `layers/dropout.py` imports this module, when a TensorFlow-backend layer drops something, so the layers import
no TensorFlow under the other Keras backends.
"""

import tensorflow as tf

MASK_BITS = 16
_LEVELS = 1 << MASK_BITS


def drop_threshold(rate):
    """The 16-bit level under which an element is dropped: `round(rate · 2^16)`, at least 1 for a rate > 0."""
    return max(1, min(_LEVELS - 1, round(rate * _LEVELS)))


def dropout16(inputs, rate, seed):
    """Inverted dropout with one 16-bit random integer per element.

    An element is dropped when its random level is below `drop_threshold(rate)`, so the dropped fraction is that
    threshold / 2^16: within 2^-17 of `rate` (0.1 becomes 0.100006). Kept elements are scaled by the exact inverse of
    the kept fraction, so the expected output equals the input. One Philox call yields two masks' worth of bits,
    where `tf.nn.experimental.stateless_dropout` draws a float32 (32 bits) per element.

    Args:
        inputs: a float tensor.
        rate: the drop probability, `0 < rate < 1`.
        seed: int32 `(2,)` stateless seed.
    """
    threshold = drop_threshold(rate)
    size = tf.size(inputs)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32)
    levels = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    keep = tf.reshape(levels >= tf.constant(threshold, tf.uint16), tf.shape(inputs))
    scale = tf.cast(_LEVELS / (_LEVELS - threshold), inputs.dtype)
    return tf.where(keep, inputs * scale, tf.zeros_like(inputs))


def seeded_dropout16(inputs, rate, seed_generator):
    """`dropout16` with a stateless seed drawn from a Keras `SeedGenerator` (which advances)."""
    seed = tf.cast(tf.math.floormod(seed_generator.next(), tf.int32.max - 1), tf.int32)
    return dropout16(inputs, rate, seed)
