"""The encoder stack (§3.1)."""

from typing import Any, NamedTuple

import keras

from t2t_keras.layers import masks
from t2t_keras.layers.encoder_block import EncoderBlock
from t2t_keras.layers.stack import TransformerStack


class EncoderOutput(NamedTuple):
    output: Any  # (batch, source_len, hidden_dim), the "memory"
    weights: Any  # per layer, (batch, heads, source_len, source_len)


@keras.saving.register_keras_serializable(package="t2t_keras")
class Encoder(TransformerStack):
    """N `EncoderBlock`s. Arguments: see `TransformerStack`.

    Call arguments:
        inputs: embedded source `(batch, source_len, hidden_dim)`.
        padding_mask: boolean `(batch, source_len)`, True on real tokens.
        training: whether dropout is active.

    Returns:
        `EncoderOutput(output, weights)`: the encoder output ("memory") and
        the list of per-layer self-attention weights.
    """

    block_class = EncoderBlock

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)
        self.build_shared(input_shape)

    def call(self, inputs, padding_mask=None, training=None):
        mask = masks.attention_mask(key_padding=padding_mask)
        length = keras.ops.shape(inputs)[1]
        biases = self.position_biases(length, length)
        x, weights = inputs, []
        for block, bias in zip(self.blocks, biases):
            x, layer_weights = block(x, attention_mask=mask, training=training, attention_bias=bias)
            weights.append(layer_weights)
        return EncoderOutput(self._finish(x), weights)
