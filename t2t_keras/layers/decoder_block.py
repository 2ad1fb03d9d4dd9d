"""One decoder layer: masked self-attention, encoder-decoder attention, feed-forward (§3.1)."""

import keras

from t2t_keras.layers.block import TransformerBlock


@keras.saving.register_keras_serializable(package="t2t_keras")
class DecoderBlock(TransformerBlock):
    """Decoder layer of §3.1. Arguments: see `TransformerBlock`.

    Call arguments:
        inputs: `(batch, target_len, hidden_dim)`.
        memory: the encoder output `(batch, source_len, hidden_dim)`; may be
            None when `cache` holds its precomputed keys/values.
        self_attention_mask: boolean, broadcastable to `(batch, target_len, key_len)`.
        cross_attention_mask: boolean, broadcastable to `(batch, target_len, source_len)`.
        cache: optional `{"self": {...}, "cross": {...}}` (see
            `MultiHeadAttention`) for incremental decoding.
        cache_index: position of `inputs[:, 0]` in the sequence being decoded.
        return_attention_scores: also return `{"self": ..., "cross": ...}` weights.
        training: whether dropout is active.

    Returns:
        `(batch, target_len, hidden_dim)`; then the weights dict if asked for;
        then the updated cache if one was given.
    """

    def build(self, inputs_shape, memory_shape=None):
        hidden_dim = inputs_shape[-1]
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        self.self_attention = self._attention(hidden_dim, "self_attention")
        self.self_attention.build(inputs_shape)
        self.cross_attention = self._attention(hidden_dim, "cross_attention")
        self.cross_attention.build(inputs_shape, memory_shape)
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(inputs_shape)
        self.self_attention_connection = self._connection("self_attention_connection")
        self.cross_attention_connection = self._connection("cross_attention_connection")
        self.feed_forward_connection = self._connection("feed_forward_connection")
        for connection in (self.self_attention_connection, self.cross_attention_connection,
                           self.feed_forward_connection):
            connection.build(inputs_shape)

    def init_cache(self, memory, max_length):
        """Empty self-attention slots for `max_length` steps and the projected `memory`."""
        batch = keras.ops.shape(memory)[0]
        attention = self.self_attention

        def empty(dim):
            return keras.ops.zeros((batch, max_length, attention.num_heads, dim), dtype=self.compute_dtype)

        return {
            "self": {"key": empty(attention.key_dim), "value": empty(attention.value_dim)},
            "cross": self.cross_attention.compute_key_value(memory),
        }

    def call(self, inputs, memory=None, self_attention_mask=None, cross_attention_mask=None, cache=None,
             cache_index=None, return_attention_scores=False, training=None):
        cached = cache is not None
        self_cache = cache["self"] if cached else None
        cross_cache = cache["cross"] if cached else None

        normed = self.self_attention_connection.normalize(inputs)
        out = self.self_attention(normed, attention_mask=self_attention_mask, cache=self_cache,
                                  cache_index=cache_index, return_attention_scores=True, training=training)
        attended, self_weights = out[0], out[1]
        new_self_cache = out[2] if cached else None
        x = self.self_attention_connection(inputs, attended, training=training)

        normed = self.cross_attention_connection.normalize(x)
        out = self.cross_attention(normed, memory, attention_mask=cross_attention_mask, cache=cross_cache,
                                   return_attention_scores=True, training=training)
        x = self.cross_attention_connection(x, out[0], training=training)

        x = self.feed_forward_connection(
            x, self.feed_forward(self.feed_forward_connection.normalize(x), training=training), training=training
        )
        outputs = (x,)
        if return_attention_scores:
            outputs += ({"self": self_weights, "cross": out[1]},)
        if cached:
            outputs += ({"self": new_self_cache, "cross": cross_cache},)
        return outputs[0] if len(outputs) == 1 else outputs

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape
