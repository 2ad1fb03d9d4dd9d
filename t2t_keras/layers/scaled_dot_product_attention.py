"""Scaled dot-product attention (§3.2.1)."""

import math

import keras
from keras import ops

from t2t_keras.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="t2t_keras")
class ScaledDotProductAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k)) V over several heads at once.

    Masked positions are removed by Keras' masked softmax, which is dtype-aware
    (safe in float16) and sets their weights to exactly 0.

    Args:
        dropout: dropout rate on the attention weights (0 in the paper).
        scale: divide the scores by sqrt(d_k) (§3.2.1); T5 does not (its initialisation holds the factor).

    Call arguments:
        query: `(batch, query_len, heads, key_dim)`.
        key: `(batch, key_len, heads, key_dim)`.
        value: `(batch, key_len, heads, value_dim)`.
        attention_mask: boolean, broadcastable to `(batch, query_len, key_len)`; True = attend.
        training: whether dropout is active.
        attention_bias: added to the scores, broadcastable to `(batch, heads, query_len, key_len)`: T5's
            relative position bias (`RelativePositionBias`).
        heads_first: `key` and `value` are `(batch, heads, key_len, dim)` instead, the layout of the decoding
            caches: both products then read them as stored, where the default layout has every step transpose
            the whole cache.

    Returns:
        `(output, weights)`: `(batch, query_len, heads, value_dim)` and
        `(batch, heads, query_len, key_len)`.

    References:
        Vaswani et al., 2017, §3.2.1.
    """

    def __init__(self, dropout=0.0, scale=True, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
        self.dropout = dropout
        self.scale = scale
        self.softmax = keras.layers.Softmax(axis=-1, dtype=self.dtype_policy, name="softmax")
        self.weights_dropout = Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def call(self, query, key, value, attention_mask=None, training=None, heads_first=False, attention_bias=None):
        # Scale the queries rather than the scores: fewer multiplies, and
        # smaller intermediate values in float16.
        if self.scale:
            query = query * ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype)
        keys = "bhkd" if heads_first else "bkhd"
        scores = ops.einsum(f"bqhd,{keys}->bhqk", query, key)  # (batch, heads, query_len, key_len)
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, scores.dtype)
        mask = None if attention_mask is None else ops.expand_dims(attention_mask, axis=1)  # broadcast over heads
        weights = self.softmax(scores, mask=mask)
        dropped = self.weights_dropout(weights, training=training)
        output = ops.einsum(f"bhqk,{keys}->bqhd", dropped, value)  # (batch, query_len, heads, value_dim)
        return output, weights

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout, "scale": self.scale})
        return config
