"""One encoder layer: self-attention and feed-forward, each wrapped in a sublayer connection (§3.1)."""

import keras

from t2t_keras.layers.block import TransformerBlock


@keras.saving.register_keras_serializable(package="t2t_keras")
class EncoderBlock(TransformerBlock):
    """Encoder layer of §3.1. Arguments: see `TransformerBlock`.

    Call arguments:
        inputs: `(batch, source_len, hidden_dim)`.
        attention_mask: boolean, broadcastable to `(batch, source_len, source_len)`.
        return_attention_scores: also return the self-attention weights.
        training: whether dropout is active.

    Returns:
        `(batch, source_len, hidden_dim)`, and the `(batch, heads, source_len,
        source_len)` weights if asked for.
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

    def call(self, inputs, attention_mask=None, return_attention_scores=False, training=None):
        normed = self.self_attention_connection.normalize(inputs)
        attended, weights = self.self_attention(
            normed, attention_mask=attention_mask, return_attention_scores=True, training=training
        )
        x = self.self_attention_connection(inputs, attended, training=training)
        x = self.feed_forward_connection(
            x, self.feed_forward(self.feed_forward_connection.normalize(x), training=training), training=training
        )
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape
