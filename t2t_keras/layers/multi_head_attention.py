"""Multi-head attention (§3.2.2), with precomputed keys/values and an incremental key/value cache."""

from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_keras.layers.arguments import constructor_arguments, store_arguments
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.scaled_dot_product_attention import ScaledDotProductAttention
from t2t_keras.layers.shapes import reshape_trailing, rows


class AttentionOutput(NamedTuple):
    """What an attention call returns."""

    output: Any  # (batch, query_len, output_dim)
    weights: Any  # (batch, heads, query_len, key_len), the softmax weights before dropout


class CachedAttentionOutput(NamedTuple):
    """What a cached self-attention step returns."""

    output: Any  # (batch, query_len, output_dim)
    weights: Any  # (batch, heads, query_len, cache_slots)
    cache: Any  # {"key": (batch, heads, slots, key_dim), "value": (batch, heads, slots, value_dim)}


@keras.saving.register_keras_serializable(package="t2t_keras")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    `key_dim` (d_k) and `value_dim` (d_v) are independent of the model width, as
    Table 3 rows (A) and (B) require. Projections are stored as 2-D kernels
    `(input_dim, heads * dim)` so Glorot initialisation sees the true fan-in and
    fan-out, and each projection is a single matmul.

    Args:
        num_heads: h.
        key_dim: d_k, size of each query/key head.
        value_dim: d_v, size of each value head; defaults to `key_dim`.
        output_dim: width of the output; defaults to the query's last dimension.
        dropout: dropout on the attention weights.
        use_bias: whether the projections have biases (T5's have none).
        scale: divide the scores by sqrt(d_k) (§3.2.1; T5 does not).

    Call arguments:
        query: `(batch, query_len, query_dim)`.
        value: `(batch, key_len, value_dim_in)`; also the key unless `key` is
            given; defaults to `query` (self-attention).
        key: optional `(batch, key_len, key_dim_in)`.
        attention_mask: boolean, broadcastable to `(batch, query_len, key_len)`; True = attend.
        training: whether dropout is active.
        attention_bias: added to the scores, broadcastable to `(batch, heads, query_len, key_len)` (T5's
            relative position bias); every method takes it.

    Returns:
        `AttentionOutput(output, weights)`.

    Two more methods serve incremental decoding (`decoding/`), each with one
    return shape: `attend_precomputed` attends to keys/values projected once by
    `cache_key_value` (cross-attention to a fixed encoder output), and
    `attend_cached` writes the step's keys/values into a cache and attends
    over it (self-attention one position at a time). Decoding caches hold
    keys/values heads first, `(batch, heads, length, dim)`: the layout both
    attention products read without transposing the whole cache at every step.

    References:
        Vaswani et al., 2017, §3.2.2.
    """

    def __init__(self, num_heads, key_dim, value_dim=None, output_dim=None, dropout=0.0, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", scale=True, **kwargs):
        super().__init__(**kwargs)
        value_dim = key_dim if value_dim is None else value_dim
        for name, value in (("num_heads", num_heads), ("key_dim", key_dim), ("value_dim", value_dim)):
            if int(value) <= 0:
                raise ValueError(f"{name} must be a positive integer. Received: {name}={value}")
        store_arguments(self, MultiHeadAttention, locals())
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention = ScaledDotProductAttention(dropout, scale, dtype=self.dtype_policy, name="attention")

    def _dense(self, units, name):
        return Dense(
            units, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer, dtype=self.dtype_policy, name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self.query_dense = self._dense(self.num_heads * self.key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._dense(self.num_heads * self.key_dim, "key")
        self.key_dense.build(key_shape)
        self.value_dense = self._dense(self.num_heads * self.value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = self._dense(self.output_dim or query_shape[-1], "output")
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.value_dim,))
        self.attention.build(None)  # weightless; marked built so the model counts as fully built

    def _heads(self, dense, x, head_dim):
        """`dense(x)` split into heads, `(batch, length, heads, head_dim)`: the projection multiplies the rows of
        `x` as one matrix, and one reshape both restores `(batch, length)` and splits the heads."""
        return reshape_trailing(dense(rows(x)), 1, (self.num_heads, head_dim), like=x)

    def compute_key_value(self, value, key=None):
        """Projects keys and values once, e.g. the encoder output for cross-attention."""
        key = value if key is None else key
        return {
            "key": self._heads(self.key_dense, key, self.key_dim),
            "value": self._heads(self.value_dense, value, self.value_dim),
        }

    def cache_key_value(self, value, key=None):
        """`compute_key_value` in the layout of the decoding caches, heads first: `(batch, heads, length, dim)`."""
        return {name: ops.transpose(tensor, (0, 2, 1, 3))
                for name, tensor in self.compute_key_value(value, key).items()}

    def _attend(self, query, key_value, attention_mask, training, heads_first=False, attention_bias=None):
        """Attention of the projected `query` heads over projected keys/values; `AttentionOutput`."""
        heads, weights = self.attention(
            query, key_value["key"], key_value["value"], attention_mask=attention_mask, training=training,
            heads_first=heads_first, attention_bias=attention_bias,
        )  # (batch, query_len, heads, value_dim)
        output = self.output_dense(rows(heads, self.num_heads * self.value_dim))  # heads merged, one product
        return AttentionOutput(reshape_trailing(output, 2, (output.shape[-1],), like=heads), weights)

    def call(self, query, value=None, key=None, attention_mask=None, training=None, attention_bias=None):
        value = query if value is None else value
        q = self._heads(self.query_dense, query, self.key_dim)  # (batch, query_len, heads, key_dim)
        return self._attend(q, self.compute_key_value(value, key), attention_mask, training,
                            attention_bias=attention_bias)

    def attend_precomputed(self, query, key_value, attention_mask=None, training=None, attention_bias=None):
        """Attention over keys/values from `cache_key_value` (heads first); returns `AttentionOutput`."""
        q = self._heads(self.query_dense, query, self.key_dim)
        return self._attend(q, key_value, attention_mask, training, heads_first=True, attention_bias=attention_bias)

    def attend_cached(self, query, cache, cache_index, attention_mask=None, training=None, attention_bias=None):
        """Self-attention of `query` (positions `cache_index ...`) over a key/value cache.

        The keys/values of `query` are written into `cache` (heads first, `(batch, heads, slots, dim)`) at
        `cache_index` first; `attention_mask` must hide the slots not yet written. With `cache_index=None` the
        cache grows instead: they are appended to it, and every key is one already computed.

        Returns:
            `CachedAttentionOutput(output, weights, cache)` with the updated cache.
        """
        q = self._heads(self.query_dense, query, self.key_dim)
        new = {name: ops.cast(value, cache[name].dtype) for name, value in self.cache_key_value(query).items()}
        if cache_index is None:
            cache = {name: ops.concatenate([cache[name], new[name]], axis=2) for name in ("key", "value")}
        else:
            start = [0, 0, cache_index, 0]
            cache = {name: ops.slice_update(cache[name], start, new[name]) for name in ("key", "value")}
        output, weights = self._attend(q, cache, attention_mask, training, heads_first=True,
                                       attention_bias=attention_bias)
        return CachedAttentionOutput(output, weights, cache)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in ATTENTION_ARGUMENTS})
        config.update(kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config


ATTENTION_ARGUMENTS = constructor_arguments(MultiHeadAttention)
