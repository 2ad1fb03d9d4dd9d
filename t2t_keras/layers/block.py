"""What encoder and decoder blocks share: hyperparameters and sublayer factories."""

import keras

from t2t_keras.architecture import head_dims
from t2t_keras.layers.arguments import constructor_arguments, store_arguments
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
        normalization: "layer" (LayerNorm) or "rms" (T5's RMS normalisation).
        gated_feed_forward: the gated feed-forward network (T5 v1.1; `FeedForward`).
        use_bias: biases in every projection (T5: none).
        scale_attention: divide the attention scores by sqrt(d_k) (T5: no).
    """

    def __init__(self, num_heads, intermediate_dim, key_dim=None, value_dim=None, dropout=0.1,
                 attention_dropout=0.0, activation_dropout=0.0, activation="relu", normalize_first=False,
                 layer_norm_epsilon=1e-6, normalization="layer", gated_feed_forward=False, use_bias=True,
                 scale_attention=True, **kwargs):
        super().__init__(**kwargs)
        store_arguments(self, TransformerBlock, locals())

    def _attention(self, hidden_dim, name):
        key_dim, value_dim = head_dims(hidden_dim, self.num_heads, self.key_dim, self.value_dim)
        return MultiHeadAttention(
            self.num_heads, key_dim, value_dim, dropout=self.attention_dropout, use_bias=self.use_bias,
            scale=self.scale_attention, dtype=self.dtype_policy, name=name
        )

    def _feed_forward(self):
        return FeedForward(
            self.intermediate_dim, self.activation, self.activation_dropout, gated=self.gated_feed_forward,
            use_bias=self.use_bias, dtype=self.dtype_policy, name="feed_forward",
        )

    def _connection(self, name):
        return SublayerConnection(
            self.dropout, self.normalize_first, self.layer_norm_epsilon, self.normalization, dtype=self.dtype_policy,
            name=name
        )

    def _feed_forward_sublayer(self, x, training):
        """The position-wise feed-forward network (§3.3) inside its sublayer connection."""
        connection = self.feed_forward_connection
        return connection(x, self.feed_forward(connection.normalize(x), training=training), training=training)

    def get_config(self):
        config = super().get_config()
        config.update(self.block_config())
        return config

    def block_config(self):
        """The block hyperparameters (the constructor arguments), e.g. to build a stack of equal blocks."""
        return {name: getattr(self, name) for name in BLOCK_ARGUMENTS}


BLOCK_ARGUMENTS = constructor_arguments(TransformerBlock)
