"""Position-wise feed-forward network (§3.3)."""

import keras

from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.shapes import reshape_trailing, rows


@keras.saving.register_keras_serializable(package="t2t_keras")
class FeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately.

    Args:
        intermediate_dim: d_ff, the inner width (2048 in the base model).
        activation: the inner nonlinearity (ReLU in the paper).
        dropout: dropout on the inner activations (0 in the paper; tensor2tensor's
            `relu_dropout`).

    Call arguments:
        inputs: `(batch, length, hidden_dim)`.
        training: whether dropout is active.

    Returns:
        `(batch, length, hidden_dim)`.

    References:
        Vaswani et al., 2017, §3.3.
    """

    def __init__(self, intermediate_dim, activation="relu", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if intermediate_dim <= 0:
            raise ValueError(f"intermediate_dim must be positive. Received: intermediate_dim={intermediate_dim}")
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.dropout = dropout

    def build(self, input_shape):
        self.inner = Dense(
            self.intermediate_dim, activation=self.activation, dtype=self.dtype_policy, name="inner"
        )
        self.inner.build(input_shape)
        self.inner_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.outer = Dense(input_shape[-1], dtype=self.dtype_policy, name="outer")
        self.outer.build(tuple(input_shape[:-1]) + (self.intermediate_dim,))

    def call(self, inputs, training=None):
        # Both products on the positions as rows of one matrix: one reshape in, one out.
        hidden = self.inner_dropout(self.inner(rows(inputs)), training=training)  # (positions, d_ff)
        return reshape_trailing(self.outer(hidden), 1, (self.outer.units,), like=inputs)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"intermediate_dim": self.intermediate_dim, "activation": self.activation, "dropout": self.dropout}
        )
        return config
