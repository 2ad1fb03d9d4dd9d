"""One decoder layer: masked self-attention, encoder-decoder attention, feed-forward (§3.1)."""

from typing import Any, NamedTuple

import keras

from t2t_keras.layers.block import TransformerBlock


class DecoderBlockOutput(NamedTuple):
    output: Any  # (batch, target_len, hidden_dim)
    self_weights: Any  # (batch, heads, target_len, target_len), or (..., cache_slots) in a step
    cross_weights: Any  # (batch, heads, target_len, source_len); None without cross-attention


class DecoderBlockStep(NamedTuple):
    output: Any  # (batch, target_len, hidden_dim)
    self_weights: Any  # (batch, heads, target_len, cache_slots)
    cross_weights: Any  # (batch, heads, target_len, source_len); None without cross-attention
    cache: Any  # the updated {"self": ..., "cross": ...} cache of this block ("self" only without cross-attention)


@keras.saving.register_keras_serializable(package="t2t_keras")
class DecoderBlock(TransformerBlock):
    """Decoder layer of §3.1. Arguments: see `TransformerBlock`, and

    Args:
        use_cross_attention: False leaves out the encoder-decoder attention: the
            block of a decoder-only language model (masked self-attention and
            feed-forward).

    Call arguments:
        inputs: `(batch, target_len, hidden_dim)`.
        memory: the encoder output `(batch, source_len, hidden_dim)`; must be
            None exactly when the block has no cross-attention.
        self_attention_mask: boolean, broadcastable to `(batch, target_len, target_len)`;
            the caller makes it causal (`masks.causal_mask`).
        cross_attention_mask: boolean, broadcastable to `(batch, target_len, source_len)`.
        self_attention_bias: added to the self-attention scores (the relative position bias of the stack or of
            this layer), or None; `decode_step` takes it too, for its positions against the cache.
        training: whether dropout is active.

    Returns:
        `DecoderBlockOutput(output, self_weights, cross_weights)`.

    `decode_step` runs the same layer on positions `cache_index ...` only,
    against the cache from `init_cache`; it returns a `DecoderBlockStep`.
    """

    def __init__(self, num_heads, intermediate_dim, use_cross_attention=True, **kwargs):
        super().__init__(num_heads, intermediate_dim, **kwargs)
        self.use_cross_attention = use_cross_attention

    def build(self, inputs_shape, memory_shape=None):
        hidden_dim = inputs_shape[-1]
        self.self_attention = self._attention(hidden_dim, "self_attention")
        self.self_attention.build(inputs_shape)
        self.self_attention_connection = self._connection("self_attention_connection")
        if self.use_cross_attention:
            self.cross_attention = self._attention(hidden_dim, "cross_attention")
            self.cross_attention.build(inputs_shape, inputs_shape if memory_shape is None else memory_shape)
            self.cross_attention_connection = self._connection("cross_attention_connection")
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(inputs_shape)
        self.feed_forward_connection = self._connection("feed_forward_connection")
        for connection in self._connections():
            connection.build(inputs_shape)

    def _connections(self):
        middle = (self.cross_attention_connection,) if self.use_cross_attention else ()
        return (self.self_attention_connection, *middle, self.feed_forward_connection)

    def init_cache(self, memory, max_length, batch_size=None):
        """Empty self-attention slots for `max_length` steps and, with cross-attention, the projected `memory`.

        `max_length` None: a growing cache, without slots, that each step extends (`decode_step` with
        `cache_index=None`). Without cross-attention `memory` is None and `batch_size` gives the rows.
        """
        self._check_memory(memory)
        batch = batch_size if memory is None else keras.ops.shape(memory)[0]
        attention = self.self_attention

        def empty(dim):
            slots = 0 if max_length is None else max_length
            return keras.ops.zeros((batch, attention.num_heads, slots, dim), dtype=self.compute_dtype)

        cache = {"self": {"key": empty(attention.key_dim), "value": empty(attention.value_dim)}}
        if self.use_cross_attention:
            cache["cross"] = self.cross_attention.cache_key_value(memory)
        return cache

    def call(self, inputs, memory=None, self_attention_mask=None, cross_attention_mask=None, training=None,
             self_attention_bias=None):
        self._check_memory(memory)
        attended, self_weights = self.self_attention(
            self.self_attention_connection.normalize(inputs), attention_mask=self_attention_mask, training=training,
            attention_bias=self_attention_bias,
        )
        x = self.self_attention_connection(inputs, attended, training=training)
        cross_weights = None
        if self.use_cross_attention:
            attended, cross_weights = self.cross_attention(
                self.cross_attention_connection.normalize(x), memory, attention_mask=cross_attention_mask,
                training=training,
            )
            x = self.cross_attention_connection(x, attended, training=training)
        return DecoderBlockOutput(self._feed_forward_sublayer(x, training), self_weights, cross_weights)

    def decode_step(self, inputs, cache, cache_index, self_attention_mask=None, cross_attention_mask=None,
                    training=None, self_attention_bias=None):
        """The layer on positions `cache_index ...` given the cache (None: appended to a growing cache); returns a
        `DecoderBlockStep`."""
        attended, self_weights, self_cache = self.self_attention.attend_cached(
            self.self_attention_connection.normalize(inputs), cache["self"], cache_index,
            attention_mask=self_attention_mask, training=training, attention_bias=self_attention_bias,
        )
        x = self.self_attention_connection(inputs, attended, training=training)
        cross_weights = None
        if self.use_cross_attention:
            attended, cross_weights = self.cross_attention.attend_precomputed(
                self.cross_attention_connection.normalize(x), cache["cross"], attention_mask=cross_attention_mask,
                training=training,
            )
            x = self.cross_attention_connection(x, attended, training=training)
        output = self._feed_forward_sublayer(x, training)
        return DecoderBlockStep(output, self_weights, cross_weights, {**cache, "self": self_cache})

    def _check_memory(self, memory):
        """A decoder block attends to an encoder output exactly when it has cross-attention."""
        if self.use_cross_attention and memory is None:
            raise ValueError("This DecoderBlock has cross-attention and needs the encoder output: pass memory, "
                             "or build it with use_cross_attention=False for a decoder-only model.")
        if not self.use_cross_attention and memory is not None:
            raise ValueError("This DecoderBlock has no cross-attention (use_cross_attention=False): pass "
                             "memory=None.")

    def get_config(self):
        config = super().get_config()
        config["use_cross_attention"] = self.use_cross_attention
        return config
