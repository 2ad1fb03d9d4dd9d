"""An encoder-only model with a masked-LM head and a pooled output (BERT-style)."""

import keras
from keras import ops

from t2t_keras.language_models.single_stack import SingleStackModel
from t2t_keras.layers import Dense, Encoder, LayerNormalization


@keras.saving.register_keras_serializable(package="t2t_keras")
class MaskedLanguageModel(SingleStackModel):
    """A bidirectional encoder (§3.1's encoder stack) that predicts masked tokens from both sides.

    The masked-LM head transforms each position (dense + activation +
    LayerNorm) and projects it onto the vocabulary with the tied token
    embedding. `pooled` gives one vector per sequence (the mean of the real
    positions through a tanh layer), to put a classifier on. Arguments: see
    `SingleStackModel`.

    Call arguments:
        inputs: int `(batch, length)` ids (some replaced by the masking of
            `data.masking`), padded with `pad_id`.
        training: whether dropout is active.

    Returns:
        float32 logits `(batch, length, vocab_size)`; the loss is taken at the
        masked positions only (their sample weights).
    """

    def __init__(self, vocab_size, **kwargs):
        super().__init__(vocab_size, **kwargs)
        policy = self.dtype_policy
        self.encoder = Encoder(self.num_layers, self.block_config(), dtype=policy, name="encoder")
        self.head_transform = Dense(self.hidden_dim, activation=self.activation, dtype=policy,
                                    name="head_transform")
        self.head_norm = LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=policy,
                                                         name="head_norm")
        self.pooler = Dense(self.hidden_dim, activation="tanh", dtype=policy, name="pooler")

    def build(self, input_shape=None):
        """Creates every weight; the shapes of the inputs do not matter."""
        shape = (None, None, self.hidden_dim)
        self.build_embeddings()
        self.encoder.build(shape)
        for layer in (self.head_transform, self.head_norm):
            layer.build(shape)
        self.pooler.build((None, self.hidden_dim))
        self.built = True

    def encode(self, inputs, training=None):
        """The encoder output `(batch, length, hidden_dim)`."""
        x = self.embed(inputs, training=training)
        return self.encoder(x, self.padding_mask(inputs), training=training).output

    def call(self, inputs, training=None):
        hidden = self.head_norm(self.head_transform(self.encode(inputs, training=training)))
        return self.project(hidden)

    def pooled(self, inputs, training=None):
        """`(batch, hidden_dim)`: the mean of the real positions' encodings, through a tanh layer."""
        hidden = self.encode(inputs, training=training)
        real = ops.cast(self.padding_mask(inputs), hidden.dtype)[:, :, None]
        mean = ops.sum(hidden * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
        return self.pooler(mean)
