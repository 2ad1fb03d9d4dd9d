"""Sinusoidal positional encoding (§3.5), in the paper's layout or those of Marian and fairseq."""

import math

import keras
from keras import ops

from t2t_keras.architecture import SINUSOID_CHOICES, check_choice


@keras.saving.register_keras_serializable(package="t2t_keras")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Adds the fixed sinusoids of §3.5 to a sequence of embeddings.

    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
    interleaved exactly as the paper writes them. The encoding is computed on the
    fly (no table), so any position works and XLA folds it into a few ops.

    Pretrained checkpoints lay the same sinusoids out differently (`layout`):
    Marian puts the ceil(d/2) sines first and the cosines after them ("split"),
    with the paper's frequencies; fairseq (M2M-100, NLLB) splits the same way with
    frequencies max_wavelength^(-i / (d/2 - 1)), i = 0 .. d/2 - 1, and a zero
    column for an odd d ("fairseq"), and counts positions from padding id + 1
    (`offset`).

    Args:
        max_wavelength: the base of the geometric progression (10000 in the paper).
        layout: "interleaved" (§3.5), "split" (Marian) or "fairseq".
        offset: the index in the sinusoid of position 0 (fairseq: 2).

    Call arguments:
        inputs: `(batch, length, hidden_dim)` embeddings.
        start_index: position of the first element (an int or scalar tensor);
            incremental decoding passes the current step.

    Returns:
        `inputs` plus the encoding of positions `start_index ... start_index + length - 1`.

    References:
        Vaswani et al., 2017, §3.5.
    """

    def __init__(self, max_wavelength=10000.0, layout="interleaved", offset=0, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(f"max_wavelength must be positive. Received: max_wavelength={max_wavelength}")
        check_choice("layout", layout, SINUSOID_CHOICES)
        if offset < 0:
            raise ValueError(f"offset must be >= 0. Received: offset={offset}")
        self.max_wavelength = max_wavelength
        self.layout = layout
        self.offset = offset
        self.supports_masking = True

    def encoding(self, length, hidden_dim, start_index=0):
        """The `(length, hidden_dim)` float32 encoding starting at `start_index`."""
        first = start_index + self.offset if self.offset else start_index
        positions = ops.cast(ops.arange(length) + first, "float32")[:, None]
        if self.layout == "fairseq":
            half = hidden_dim // 2  # the frequencies of fairseq's sinusoidal_positional_embedding.py
            exponent = -math.log(self.max_wavelength) / (half - 1)
        else:
            half = (hidden_dim + 1) // 2  # 1 / 10000^(2i/d) for i = 0 .. half-1
            exponent = -2.0 * math.log(self.max_wavelength) / hidden_dim
        inverse_frequencies = ops.exp(ops.arange(half, dtype="float32") * exponent)
        angles = positions * inverse_frequencies[None, :]  # (length, half)
        if self.layout == "interleaved":
            interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # (length, half, 2)
            return ops.reshape(interleaved, (length, 2 * half))[:, :hidden_dim]
        if self.layout == "split":  # an odd d has one cosine fewer than sines
            return ops.concatenate([ops.sin(angles), ops.cos(angles[:, :hidden_dim - half])], axis=-1)
        zeros = ops.zeros((length, hidden_dim % 2), "float32")  # fairseq pads an odd d with a zero column
        return ops.concatenate([ops.sin(angles), ops.cos(angles), zeros], axis=-1)

    def call(self, inputs, start_index=0):
        length, hidden_dim = ops.shape(inputs)[1], inputs.shape[-1]
        encoding = self.encoding(length, hidden_dim, start_index)
        return inputs + ops.cast(encoding, inputs.dtype)[None, :, :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength, "layout": self.layout, "offset": self.offset})
        return config
