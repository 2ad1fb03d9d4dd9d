"""Multi-head attention (§3.2.2) with an incremental key/value cache."""

import keras
from keras import ops

from t2t_keras.layers.scaled_dot_product_attention import ScaledDotProductAttention


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
        use_bias: whether the projections have biases.

    Call arguments:
        query: `(batch, query_len, query_dim)`.
        value: `(batch, key_len, value_dim_in)`; also the key unless `key` is given.
        key: optional `(batch, key_len, key_dim_in)`.
        attention_mask: boolean, broadcastable to `(batch, query_len, key_len)`.
        cache: optional dict `{"key": (batch, slots, heads, key_dim),
            "value": (batch, slots, heads, value_dim)}`. With `cache_index`, the
            keys/values of `value` are written into the cache at that position
            and attention runs over the whole cache (incremental self-attention);
            without it, the cache holds precomputed keys/values
            (see `compute_key_value`) and `value`/`key` are ignored
            (cross-attention to a fixed encoder output).
        cache_index: scalar position at which to write the new keys/values.
        return_attention_scores: also return `(batch, heads, query_len, key_len)` weights.
        training: whether dropout is active.

    Returns:
        The `(batch, query_len, output_dim)` output; followed by the attention
        weights if asked for, and by the updated cache if one was given.

    References:
        Vaswani et al., 2017, §3.2.2.
    """

    def __init__(self, num_heads, key_dim, value_dim=None, output_dim=None, dropout=0.0, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        value_dim = key_dim if value_dim is None else value_dim
        for name, value in (("num_heads", num_heads), ("key_dim", key_dim), ("value_dim", value_dim)):
            if int(value) <= 0:
                raise ValueError(f"{name} must be a positive integer. Received: {name}={value}")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention = ScaledDotProductAttention(dropout, dtype=self.dtype_policy, name="attention")

    def _dense(self, units, name):
        return keras.layers.Dense(
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

    def _split_heads(self, x, head_dim):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, head_dim))

    def compute_key_value(self, value, key=None):
        """Projects keys and values once, e.g. the encoder output for cross-attention."""
        key = value if key is None else key
        return {
            "key": self._split_heads(self.key_dense(key), self.key_dim),
            "value": self._split_heads(self.value_dense(value), self.value_dim),
        }

    def _update_cache(self, cache, new, cache_index):
        start = [0, cache_index, 0, 0]
        return {
            "key": ops.slice_update(cache["key"], start, ops.cast(new["key"], cache["key"].dtype)),
            "value": ops.slice_update(cache["value"], start, ops.cast(new["value"], cache["value"].dtype)),
        }

    def call(self, query, value=None, key=None, attention_mask=None, cache=None, cache_index=None,
             return_attention_scores=False, training=None):
        value = query if value is None else value
        q = self._split_heads(self.query_dense(query), self.key_dim)  # (batch, query_len, heads, key_dim)
        if cache is None:
            key_value = self.compute_key_value(value, key)
        elif cache_index is None:
            key_value = cache  # precomputed cross-attention keys/values
        else:
            key_value = cache = self._update_cache(cache, self.compute_key_value(value, key), cache_index)
        heads, weights = self.attention(
            q, key_value["key"], key_value["value"], attention_mask=attention_mask, training=training
        )
        batch, length = ops.shape(heads)[0], ops.shape(heads)[1]
        output = self.output_dense(ops.reshape(heads, (batch, length, self.num_heads * self.value_dim)))
        outputs = (output,)
        if return_attention_scores:
            outputs += (weights,)
        if cache is not None:
            outputs += (cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
