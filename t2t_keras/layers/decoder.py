"""The decoder stack (§3.1), with incremental decoding support."""

from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_keras.layers import masks
from t2t_keras.layers.decoder_block import DecoderBlock
from t2t_keras.layers.stack import TransformerStack


class DecoderOutput(NamedTuple):
    output: Any  # (batch, target_len, hidden_dim)
    self_weights: Any  # per layer, (batch, heads, target_len, target_len)
    cross_weights: Any  # per layer, (batch, heads, target_len, source_len); None without cross-attention


class DecoderStep(NamedTuple):
    output: Any  # (batch, target_len, hidden_dim)
    self_weights: Any  # per layer, (batch, heads, target_len, cache_slots)
    cross_weights: Any  # per layer, (batch, heads, target_len, source_len)
    cache: Any  # per layer, the updated cache


@keras.saving.register_keras_serializable(package="t2t_keras")
class Decoder(TransformerStack):
    """N `DecoderBlock`s. Arguments: see `TransformerStack`; `block_config` may hold
    `use_cross_attention=False` for a decoder-only language model.

    Call arguments:
        inputs: embedded target `(batch, target_len, hidden_dim)`.
        memory: encoder output `(batch, source_len, hidden_dim)`; None without cross-attention.
        memory_mask: boolean `(batch, source_len)`, True on real source tokens.
        training: whether dropout is active.

    Returns:
        `DecoderOutput(output, self_weights, cross_weights)`; self-attention is causal.

    Incremental decoding: `init_cache(memory, max_length)` projects the memory
    once, and `decode_step(inputs, cache, cache_index, memory_mask)` runs
    positions `cache_index ...` against it, returning a `DecoderStep`.
    """

    block_class = DecoderBlock
    bidirectional = False

    def build(self, inputs_shape, memory_shape=None):
        for block in self.blocks:
            block.build(inputs_shape, memory_shape)
        self.build_shared(inputs_shape)

    def init_cache(self, memory, max_length, batch_size=None):
        """A cache for decoding up to `max_length` tokens against `memory` (or, without
        cross-attention, for `batch_size` rows): one dict per block. `max_length` None: a growing cache."""
        return [block.init_cache(memory, max_length, batch_size) for block in self.blocks]

    def call(self, inputs, memory=None, memory_mask=None, training=None):
        self_mask = masks.attention_mask(causal=masks.causal_mask(ops.shape(inputs)[1]))
        cross_mask = masks.attention_mask(key_padding=memory_mask)
        length = ops.shape(inputs)[1]
        biases = self.position_biases(length, length)
        x, self_weights, cross_weights = inputs, [], []
        for block, bias in zip(self.blocks, biases):
            x, layer_self, layer_cross = block(x, memory, self_attention_mask=self_mask,
                                               cross_attention_mask=cross_mask, training=training,
                                               self_attention_bias=bias)
            self_weights.append(layer_self)
            cross_weights.append(layer_cross)
        return DecoderOutput(self._finish(x), self_weights, cross_weights)

    def decode_step(self, inputs, cache, cache_index, memory_mask=None, training=None):
        """Positions `cache_index ...` of the target against the cache; returns a `DecoderStep`.

        `cache_index` None: the cache grows (`init_cache(memory, None)`): it holds the earlier positions only,
        and this step's keys/values are appended to it.
        """
        slots = ops.shape(cache[0]["self"]["key"])[2]  # (batch, heads, slots, key_dim)
        queries = ops.shape(inputs)[1]
        if cache_index is None:  # keys: the `slots` earlier positions, then the queries'
            one = inputs.shape[1] == 1  # a single new position sees every key: no mask to apply
            causal = None if one else masks.causal_mask(queries, slots + queries, offset=slots)
            biases = self.position_biases(queries, slots + queries, slots)
        else:
            causal = masks.causal_mask(queries, slots, offset=cache_index)  # empty slots stay hidden
            biases = self.position_biases(queries, slots, cache_index)
        self_mask = masks.attention_mask(causal=causal)
        cross_mask = masks.attention_mask(key_padding=memory_mask)
        x, self_weights, cross_weights, new_cache = inputs, [], [], []
        for block, block_cache, bias in zip(self.blocks, cache, biases):
            x, layer_self, layer_cross, layer_cache = block.decode_step(
                x, block_cache, cache_index, self_attention_mask=self_mask, cross_attention_mask=cross_mask,
                training=training, self_attention_bias=bias,
            )
            self_weights.append(layer_self)
            cross_weights.append(layer_cross)
            new_cache.append(layer_cache)
        return DecoderStep(self._finish(x), self_weights, cross_weights, new_cache)
