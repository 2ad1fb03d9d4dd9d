"""Sinusoidal positional encoding (§3.5)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Adds the fixed sinusoids of §3.5 to a sequence of embeddings.

    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
    interleaved exactly as the paper writes them. The encoding is computed on the
    fly (no table), so any position works and XLA folds it into a few ops.

    Args:
        max_wavelength: the base of the geometric progression (10000 in the paper).

    Call arguments:
        inputs: `(batch, length, hidden_dim)` embeddings.
        start_index: position of the first element (an int or scalar tensor);
            incremental decoding passes the current step.

    Returns:
        `inputs` plus the encoding of positions `start_index ... start_index + length - 1`.

    References:
        Vaswani et al., 2017, §3.5.
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(f"max_wavelength must be positive. Received: max_wavelength={max_wavelength}")
        self.max_wavelength = max_wavelength
        self.supports_masking = True

    def encoding(self, length, hidden_dim, start_index=0):
        """The `(length, hidden_dim)` float32 encoding starting at `start_index`."""
        positions = ops.cast(ops.arange(length) + start_index, "float32")[:, None]
        half = (hidden_dim + 1) // 2
        # 1 / 10000^(2i/d) for i = 0 .. half-1
        inverse_frequencies = ops.exp(
            ops.arange(half, dtype="float32") * (-2.0 * math.log(self.max_wavelength) / hidden_dim)
        )
        angles = positions * inverse_frequencies[None, :]  # (length, half)
        interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # (length, half, 2)
        return ops.reshape(interleaved, (length, 2 * half))[:, :hidden_dim]

    def call(self, inputs, start_index=0):
        length, hidden_dim = ops.shape(inputs)[1], inputs.shape[-1]
        encoding = self.encoding(length, hidden_dim, start_index)
        return inputs + ops.cast(encoding, inputs.dtype)[None, :, :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
