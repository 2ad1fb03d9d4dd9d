"""What encoder and decoder blocks share: hyperparameters and sublayer factories."""

import keras

from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.multi_head_attention import MultiHeadAttention
from t2t_keras.layers.sublayer_connection import SublayerConnection


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderBlock` and `DecoderBlock` (§3.1).

    Args:
        num_heads: h.
        intermediate_dim: d_ff.
        key_dim: d_k; defaults to hidden_dim / num_heads.
        value_dim: d_v; defaults to key_dim.
        dropout: P_drop on every sublayer output (§5.4).
        attention_dropout: dropout on attention weights.
        activation_dropout: dropout inside the feed-forward network.
        activation: feed-forward nonlinearity.
        normalize_first: pre-LN instead of the paper's post-LN.
        layer_norm_epsilon: LayerNorm epsilon.
    """

    def __init__(self, num_heads, intermediate_dim, key_dim=None, value_dim=None, dropout=0.1,
                 attention_dropout=0.0, activation_dropout=0.0, activation="relu", normalize_first=False,
                 layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation = activation
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon

    def _head_dims(self, hidden_dim):
        if self.key_dim is None and hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden_dim={hidden_dim} is not divisible by num_heads={self.num_heads}: "
                "choose a multiple, or set key_dim and value_dim explicitly."
            )
        key_dim = self.key_dim or hidden_dim // self.num_heads
        return key_dim, self.value_dim or key_dim

    def _attention(self, hidden_dim, name):
        key_dim, value_dim = self._head_dims(hidden_dim)
        return MultiHeadAttention(
            self.num_heads, key_dim, value_dim, dropout=self.attention_dropout, dtype=self.dtype_policy, name=name
        )

    def _feed_forward(self):
        return FeedForward(
            self.intermediate_dim, self.activation, self.activation_dropout, dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _connection(self, name):
        return SublayerConnection(
            self.dropout, self.normalize_first, self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation_dropout": self.activation_dropout,
                "activation": self.activation,
                "normalize_first": self.normalize_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
