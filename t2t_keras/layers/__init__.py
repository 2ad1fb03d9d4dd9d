"""Keras layers of the Transformer (§3), each serializable."""

from t2t_keras.layers.adaptive_softmax import AdaptiveSoftmax
from t2t_keras.layers.decoder import Decoder
from t2t_keras.layers.decoder_block import DecoderBlock
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.encoder import Encoder
from t2t_keras.layers.encoder_block import EncoderBlock
from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.layer_normalization import LayerNormalization
from t2t_keras.layers.logits_bias import LogitsBias
from t2t_keras.layers.multi_head_attention import MultiHeadAttention
from t2t_keras.layers.position_embedding import LearnedPositionEmbedding
from t2t_keras.layers.positional_encoding import SinusoidalPositionEncoding
from t2t_keras.layers.relative_position_bias import RelativePositionBias
from t2t_keras.layers.rms_normalization import RMSNormalization
from t2t_keras.layers.scaled_dot_product_attention import ScaledDotProductAttention
from t2t_keras.layers.sublayer_connection import SublayerConnection
from t2t_keras.layers.token_embedding import TokenEmbedding

__all__ = [
    "AdaptiveSoftmax",
    "Decoder",
    "DecoderBlock",
    "Dense",
    "Dropout",
    "Encoder",
    "EncoderBlock",
    "FeedForward",
    "LayerNormalization",
    "LearnedPositionEmbedding",
    "LogitsBias",
    "MultiHeadAttention",
    "RMSNormalization",
    "RelativePositionBias",
    "ScaledDotProductAttention",
    "SinusoidalPositionEncoding",
    "SublayerConnection",
    "TokenEmbedding",
]
