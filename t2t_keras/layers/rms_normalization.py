"""Root-mean-square normalisation (Zhang & Sennrich, 2019), as T5 normalises: a scale, no mean, no offset."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class RMSNormalization(keras.layers.Layer):
    """y = scale * x / sqrt(mean(x^2) + epsilon) over the last axis, computed in float32.

    T5's `T5LayerNorm`: no centring and no offset; the mean square is taken in
    float32 whatever the compute dtype, and the normalised values are cast back
    to it before the scale multiplies them.

    Args:
        epsilon: added to the mean square (T5: the config's `layer_norm_epsilon`, 1e-6).

    Call arguments:
        inputs: `(..., hidden_dim)`.

    Returns:
        `(..., hidden_dim)` in the layer's compute dtype.

    References:
        Zhang & Sennrich, 2019, "Root Mean Square Layer Normalization"; Raffel et al., 2020 (T5).
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
        normalized = ops.cast(x * ops.rsqrt(variance + self.epsilon), self.compute_dtype)
        return ops.cast(self.scale, self.compute_dtype) * normalized

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config
