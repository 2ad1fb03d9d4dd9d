"""The decoder stack (§3.1), with incremental decoding support."""

import keras
from keras import ops

from t2t_keras.layers import masks
from t2t_keras.layers.decoder_block import DecoderBlock
from t2t_keras.layers.stack import TransformerStack


@keras.saving.register_keras_serializable(package="t2t_keras")
class Decoder(TransformerStack):
    """N `DecoderBlock`s. Arguments: see `TransformerStack`.

    Call arguments:
        inputs: embedded target `(batch, target_len, hidden_dim)`.
        memory: encoder output `(batch, source_len, hidden_dim)`; may be None
            when decoding with a cache (its keys/values are in the cache).
        memory_mask: boolean `(batch, source_len)`, True on real source tokens.
        cache: optional list of per-block caches from `init_cache`.
        cache_index: position of `inputs[:, 0]`; required with `cache`.
        return_attention_scores: also return a list of per-layer weight dicts.
        training: whether dropout is active.

    Returns:
        `(batch, target_len, hidden_dim)`; then the weights list if asked for;
        then the updated cache if one was given.
    """

    block_class = DecoderBlock

    def build(self, inputs_shape, memory_shape=None):
        for block in self.blocks:
            block.build(inputs_shape, memory_shape)
        if self.final_norm is not None:
            self.final_norm.build(inputs_shape)

    def init_cache(self, memory, max_length):
        """A cache for decoding up to `max_length` tokens against `memory`."""
        return [block.init_cache(memory, max_length) for block in self.blocks]

    def call(self, inputs, memory=None, memory_mask=None, cache=None, cache_index=None,
             return_attention_scores=False, training=None):
        query_length = ops.shape(inputs)[1]
        if cache is None:
            causal = masks.causal_mask(query_length)
        else:
            slots = ops.shape(cache[0]["self"]["key"])[1]
            causal = masks.causal_mask(query_length, slots, offset=cache_index)
        self_mask = masks.attention_mask(causal=causal)
        cross_mask = masks.attention_mask(key_padding=memory_mask)
        x, weights, new_cache = inputs, [], []
        for i, block in enumerate(self.blocks):
            out = block(x, memory, self_attention_mask=self_mask, cross_attention_mask=cross_mask,
                        cache=None if cache is None else cache[i], cache_index=cache_index,
                        return_attention_scores=True, training=training)
            x = out[0]
            weights.append(out[1])
            if cache is not None:
                new_cache.append(out[2])
        outputs = (self._finish(x),)
        if return_attention_scores:
            outputs += (weights,)
        if cache is not None:
            outputs += (new_cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape
