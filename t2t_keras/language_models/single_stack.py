"""What the single-stack models share: their arguments, one token embedding with positions, the projection."""

import keras
from keras import ops

from t2t_keras.architecture import POSITION_CHOICES, check_choice
from t2t_keras.layers import LearnedPositionEmbedding, SinusoidalPositionEncoding, TokenEmbedding, masks
from t2t_keras.layers.arguments import constructor_arguments, store_arguments
from t2t_keras.layers.block import BLOCK_ARGUMENTS
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout


class SingleStackModel(keras.Model):
    """Base of `CausalLanguageModel` and `MaskedLanguageModel`: embedding (§3.4), positions (§3.5), one stack.

    Args:
        vocab_size, hidden_dim, num_layers, num_heads, intermediate_dim, key_dim,
        value_dim, dropout, attention_dropout, activation_dropout, activation,
        position_encoding, max_length, normalize_first, layer_norm_epsilon,
        pad_id: as for `Transformer`.
        tie_embeddings: True reuses the token embedding as the output
            projection (§3.4); False learns a separate one.
    """

    def __init__(self, vocab_size, hidden_dim=512, num_layers=6, num_heads=8, intermediate_dim=2048, key_dim=None,
                 value_dim=None, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, activation="relu",
                 position_encoding="sinusoidal", max_length=1024, tie_embeddings=True, normalize_first=False,
                 layer_norm_epsilon=1e-6, pad_id=0, **kwargs):
        super().__init__(**kwargs)
        check_choice("position_encoding", position_encoding, POSITION_CHOICES)
        store_arguments(self, SingleStackModel, locals())
        policy = self.dtype_policy
        self.token_embedding = TokenEmbedding(vocab_size, hidden_dim, dtype=policy, name="token_embedding")
        if position_encoding == "learned":
            self.position = LearnedPositionEmbedding(max_length, dtype=policy, name="position")
        else:
            self.position = SinusoidalPositionEncoding(dtype=policy, name="position")
        self.embedding_dropout = Dropout(dropout, dtype=policy, name="embedding_dropout")
        self.output_projection = None
        if not tie_embeddings:
            self.output_projection = Dense(vocab_size, use_bias=False, dtype=policy, name="output_projection")

    def block_config(self):
        """The keyword arguments of every block of the stack."""
        return {name: getattr(self, name) for name in BLOCK_ARGUMENTS if hasattr(self, name)}  # else the default

    def build_embeddings(self):
        shape = (None, None, self.hidden_dim)
        self.token_embedding.build()
        self.position.build(shape)
        if self.output_projection is not None:
            self.output_projection.build(shape)

    def padding_mask(self, token_ids):
        """`(batch, length)` boolean mask of real (non-padding) tokens."""
        return masks.padding_mask(token_ids, self.pad_id)

    def embed(self, token_ids, start_index=0, training=None):
        """Scaled token embeddings plus positions, with dropout (§3.4, §3.5, §5.4)."""
        x = self.position(self.token_embedding(token_ids), start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def project(self, hidden):
        """Float32 logits over the vocabulary (float32 so the softmax and loss are exact under mixed precision)."""
        if self.output_projection is None:
            logits = self.token_embedding.project(hidden)
        else:
            logits = self.output_projection(hidden)
        return ops.cast(logits, "float32")

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in constructor_arguments(SingleStackModel)})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
