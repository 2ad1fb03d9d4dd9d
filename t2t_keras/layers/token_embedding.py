"""Token embedding scaled by sqrt(d_model), reusable as the pre-softmax projection (§3.4)."""

import math

import keras
from keras import ops

from t2t_keras.layers.dense import project


@keras.saving.register_keras_serializable(package="t2t_keras")
class TokenEmbedding(keras.layers.Layer):
    """Maps token ids to `hidden_dim` vectors multiplied by sqrt(hidden_dim) (or not, `scale=False`).

    The same weight matrix serves as the pre-softmax linear transformation
    through `project()`, so one matrix can be shared by the source embedding,
    the target embedding and the output layer as in §3.4.

    Args:
        vocab_size: number of token ids.
        hidden_dim: d_model.
        initializer: defaults to N(0, hidden_dim^-0.5), which after the
            sqrt(hidden_dim) scaling gives unit-variance inputs, and keeps the
            initial logits of the tied projection small.

    Call arguments:
        token_ids: integer tensor `(batch, length)`.

    Returns:
        `(batch, length, hidden_dim)` embeddings in the layer's compute dtype.

    References:
        Vaswani et al., 2017, §3.4; Press & Wolf, 2017.
    """

    def __init__(self, vocab_size, hidden_dim, initializer=None, scale=True, **kwargs):
        super().__init__(**kwargs)
        if vocab_size <= 0 or hidden_dim <= 0:
            raise ValueError(
                "vocab_size and hidden_dim must be positive. "
                f"Received: vocab_size={vocab_size}, hidden_dim={hidden_dim}"
            )
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.scale = scale
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=hidden_dim**-0.5)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.hidden_dim), initializer=self.initializer
        )

    def call(self, token_ids):
        # Ids may arrive as floats: Keras' distributed symbolic build averages a batch across replicas.
        token_ids = ops.cast(token_ids, "int32")
        vectors = ops.take(ops.cast(self.embeddings, self.compute_dtype), token_ids, axis=0)
        if not self.scale:
            return vectors
        return vectors * ops.cast(math.sqrt(self.hidden_dim), self.compute_dtype)

    def rows(self, ids):
        """The `(S, hidden_dim)` embeddings of the int32 `(S,)` `ids`: what `project` multiplies for them. A search
        takes them once and passes them to every step (`project(..., rows=...)`) instead of gathering each time."""
        if not self.built:
            self.build()
        return ops.take(self.embeddings, ids, axis=0)

    def project(self, hidden, ids=None, rows=None):
        """Pre-softmax projection: `(..., hidden_dim)` -> `(..., vocab_size)` logits, or `(..., S)` for the
        int32 `(S,)` `ids` only (a shortlist: only their rows are multiplied), or for the `rows` of `rows(ids)`."""
        if not self.built:
            self.build()
        if rows is None:
            rows = self.embeddings if ids is None else self.rows(ids)
        embeddings = ops.cast(rows, hidden.dtype)  # (vocab_size or S, hidden_dim)
        if len(hidden.shape) == 3 and hidden.shape[1] == 1:
            # One position, as in a decoding step. With the vocabulary matrix as the right operand XLA copies
            # it transposed (vocab x hidden floats) on every step; as the left one it is a matrix-vector
            # product in the stored layout (`base`, batch 1: 9.6 -> 8.4 ms a step). Only the small operands
            # are transposed, which keeps oneDNN's kernels in graph mode.
            columns = ops.transpose(ops.squeeze(hidden, axis=1))  # (hidden_dim, batch)
            return ops.expand_dims(ops.transpose(ops.matmul(embeddings, columns)), axis=1)
        return project(hidden, ops.transpose(embeddings))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.hidden_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "hidden_dim": self.hidden_dim,
                "initializer": keras.initializers.serialize(self.initializer),
                "scale": self.scale,
            }
        )
        return config
