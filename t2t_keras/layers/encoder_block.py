"""One encoder layer: self-attention and feed-forward, each wrapped in a sublayer connection (§3.1)."""

from typing import Any, NamedTuple

import keras

from t2t_keras.layers.block import TransformerBlock


class EncoderBlockOutput(NamedTuple):
    output: Any  # (batch, source_len, hidden_dim)
    weights: Any  # (batch, heads, source_len, source_len) self-attention weights


@keras.saving.register_keras_serializable(package="t2t_keras")
class EncoderBlock(TransformerBlock):
    """Encoder layer of §3.1. Arguments: see `TransformerBlock`.

    Call arguments:
        inputs: `(batch, source_len, hidden_dim)`.
        attention_mask: boolean, broadcastable to `(batch, source_len, source_len)`.
        attention_bias: added to the self-attention scores (the relative position bias of the stack or of this
            layer), or None.
        training: whether dropout is active.

    Returns:
        `EncoderBlockOutput(output, weights)`.
    """

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        self.self_attention = self._attention(hidden_dim, "self_attention")
        self.self_attention_connection = self._connection("self_attention_connection")
        self.feed_forward = self._feed_forward()
        self.feed_forward_connection = self._connection("feed_forward_connection")
        for layer in (self.self_attention, self.feed_forward):
            layer.build(input_shape)
        for connection in (self.self_attention_connection, self.feed_forward_connection):
            connection.build(input_shape)

    def call(self, inputs, attention_mask=None, training=None, attention_bias=None):
        attended, weights = self.self_attention(
            self.self_attention_connection.normalize(inputs), attention_mask=attention_mask, training=training,
            attention_bias=attention_bias,
        )
        x = self.self_attention_connection(inputs, attended, training=training)
        return EncoderBlockOutput(self._feed_forward_sublayer(x, training), weights)
