"""Dropout whose mask costs half the random bits of Keras' (§5.4, residual dropout)."""

import keras
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


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a cheaper mask under TensorFlow (`dropout16`).

    Keras draws a float32 uniform number for every element, and on a CPU that random generation is the costliest
    elementwise op of a Transformer training step. This layer draws 16 bits per element instead: half the Philox
    work for the same masks' distribution up to the rounding of the rate to a multiple of 2^-16. The seed generator,
    its state in checkpoints and the config are Keras' own. With a `noise_shape`, or another backend, it is Keras'
    Dropout.
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0 or self.noise_shape is not None or keras.backend.backend() != "tensorflow":
            return super().call(inputs, training=training)
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        return dropout16(inputs, self.rate, seed)
