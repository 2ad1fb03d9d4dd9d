"""Layer normalization (Ba et al., 2016) as Keras computes it, without reshaping its weights on every call."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` whose call names its axes by their positive index.

    Keras keeps a negative `axis` (the default, -1) as given, and `ops.layer_normalization` recognises "the last
    axis only" by its positive index: with -1 it reshapes gamma and beta to the input's rank on every call, two
    constants and two reshapes in every trace of every normalization (and their gradients in a training step).
    The same arithmetic on the same numbers (a broadcast multiply and add either way); weights, configuration and
    serialization are Keras'.
    """

    def call(self, inputs):
        rank = len(inputs.shape)
        axis = sorted(dim % rank for dim in self.axis)
        outputs = ops.layer_normalization(inputs, self.gamma, self.beta, axis, self.epsilon,
                                          rms_scaling=self.rms_scaling)
        return ops.cast(outputs, self.compute_dtype)
