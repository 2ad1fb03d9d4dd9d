"""Every public layer survives get_config/from_config and keras serialization with identical outputs."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras import layers
from tests.helpers import TestCase

BLOCK = dict(num_heads=2, intermediate_dim=16, dropout=0.0)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# (layer, positional inputs, keyword inputs)
CASES = [
    (layers.AdaptiveSoftmax(vocab_size=20, cutoffs=[5, 12]), (_x(2, 3, 8),), {}),
    (layers.Dense(6, activation="relu"), (_x(2, 3, 8),), {}),
    (layers.Dropout(rate=0.25), (_x(2, 3, 8),), {}),
    (layers.SinusoidalPositionEncoding(), (_x(2, 3, 8),), {}),
    (layers.SinusoidalPositionEncoding(layout="fairseq", offset=2), (_x(2, 3, 8),), {}),
    (layers.LearnedPositionEmbedding(max_length=6), (_x(2, 3, 8),), {}),
    (layers.TokenEmbedding(vocab_size=11, hidden_dim=8), (np.array([[1, 2, 3]]),), {}),
    (layers.TokenEmbedding(vocab_size=11, hidden_dim=8, scale=False), (np.array([[1, 2, 3]]),), {}),
    (layers.LogitsBias(vocab_size=8), (_x(2, 3, 8),), {}),
    (layers.ScaledDotProductAttention(), (_x(1, 3, 2, 4), _x(1, 5, 2, 4, seed=1), _x(1, 5, 2, 4, seed=2)), {}),
    (layers.MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5), (_x(1, 3, 8), _x(1, 4, 8, seed=1)), {}),
    (layers.FeedForward(intermediate_dim=16), (_x(2, 3, 8),), {}),
    (layers.LayerNormalization(epsilon=1e-6), (_x(2, 3, 8),), {}),
    (layers.SublayerConnection(dropout=0.0, normalize_first=True), (_x(2, 3, 8), _x(2, 3, 8, seed=1)), {}),
    (layers.EncoderBlock(**BLOCK), (_x(2, 3, 8),), {}),
    (layers.DecoderBlock(**BLOCK), (_x(2, 3, 8), _x(2, 4, 8, seed=1)), {}),
    (layers.Encoder(num_layers=2, block_config=dict(BLOCK, normalize_first=True)), (_x(2, 3, 8),), {}),
    (layers.Decoder(num_layers=2, block_config=BLOCK), (_x(2, 3, 8), _x(2, 4, 8, seed=1)), {}),
    (layers.RMSNormalization(epsilon=1e-6), (_x(2, 3, 8),), {}),
    (layers.RelativePositionBias(num_heads=2, num_buckets=8, max_distance=20), (),
     {"query_length": 3, "key_length": 5}),
    (layers.Decoder(num_layers=2, block_config=dict(BLOCK, normalize_first=True, normalization="rms", use_bias=False,
                                                    gated_feed_forward=True, activation="gelu_tanh",
                                                    scale_attention=False),
                    relative_buckets=8, relative_max_distance=20), (_x(2, 3, 8), _x(2, 4, 8, seed=1)), {}),
    (layers.Encoder(num_layers=2, block_config=dict(BLOCK, normalize_first=True), relative_buckets=8,
                    relative_max_distance=20, relative_bias_per_layer=True), (_x(2, 3, 8),), {}),
]


def _first(output):
    return output[0] if isinstance(output, tuple) else output


class SerializationTest(TestCase):
    def test_every_public_layer_is_covered(self):
        covered = {type(layer).__name__ for layer, _, _ in CASES}
        self.assertEqual(covered, set(layers.__all__))

    def test_config_round_trip_gives_identical_outputs(self):
        for layer, args, kwargs in CASES:
            with self.subTest(layer=type(layer).__name__):
                expected = _first(layer(*args, **kwargs))
                serialized = keras.saving.serialize_keras_object(layer)
                clone = keras.saving.deserialize_keras_object(serialized)
                self.assertEqual(clone.get_config(), layer.get_config())
                _first(clone(*args, **kwargs))  # build, then copy the weights
                clone.set_weights(layer.get_weights())
                self.assertAllClose(_first(clone(*args, **kwargs)), expected, atol=1e-6)

    def test_token_embedding_projection_uses_the_same_matrix(self):
        layer = layers.TokenEmbedding(vocab_size=5, hidden_dim=4)
        vectors = layer(np.arange(5)[None])[0].numpy()
        logits = layer.project(np.eye(4, dtype="float32")).numpy()  # (4, vocab): the transposed matrix
        self.assertAllClose(logits.T * 2.0, vectors)  # embeddings are scaled by sqrt(4) = 2


if __name__ == "__main__":
    tf.test.main()
