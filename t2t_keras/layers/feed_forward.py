"""Position-wise feed-forward network (§3.3)."""

import functools

import keras

from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.shapes import reshape_trailing, rows


@keras.saving.register_keras_serializable(package="t2t_keras")
class FeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately.

    Gated (T5 v1.1, mT5, MADLAD: Shazeer, 2020): FFN(x) = (act(x W1) ⊙ (x G)) W2, with a
    second inner projection `gate` of the same width.

    Args:
        intermediate_dim: d_ff, the inner width (2048 in the base model).
        activation: the inner nonlinearity (ReLU in the paper); "gelu_tanh" is GELU's tanh
            approximation (T5's `gelu_new`), the others Keras' names.
        dropout: dropout on the inner activations (0 in the paper; tensor2tensor's
            `relu_dropout`).
        gated: the gated variant above.
        use_bias: whether the projections have biases (T5's have none).

    Call arguments:
        inputs: `(batch, length, hidden_dim)`.
        training: whether dropout is active.

    Returns:
        `(batch, length, hidden_dim)`.

    References:
        Vaswani et al., 2017, §3.3.
    """

    def __init__(self, intermediate_dim, activation="relu", dropout=0.0, gated=False, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        if intermediate_dim <= 0:
            raise ValueError(f"intermediate_dim must be positive. Received: intermediate_dim={intermediate_dim}")
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.dropout = dropout
        self.gated = gated
        self.use_bias = use_bias

    def build(self, input_shape):
        # Keras' Dense applies Keras' activations; the tanh-approximated GELU is applied here, after it.
        self._after = functools.partial(keras.activations.gelu, approximate=True) \
            if self.activation == "gelu_tanh" else None
        inner_activation = None if self._after is not None else self.activation
        self.inner = Dense(self.intermediate_dim, activation=inner_activation, use_bias=self.use_bias,
                           dtype=self.dtype_policy, name="inner")
        self.inner.build(input_shape)
        self.gate = None
        if self.gated:
            self.gate = Dense(self.intermediate_dim, use_bias=self.use_bias, dtype=self.dtype_policy, name="gate")
            self.gate.build(input_shape)
        self.inner_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.outer = Dense(input_shape[-1], use_bias=self.use_bias, dtype=self.dtype_policy, name="outer")
        self.outer.build(tuple(input_shape[:-1]) + (self.intermediate_dim,))

    def call(self, inputs, training=None):
        # Both products on the positions as rows of one matrix: one reshape in, one out.
        positions = rows(inputs)
        hidden = self.inner(positions)  # (positions, d_ff)
        if self._after is not None:
            hidden = self._after(hidden)
        if self.gate is not None:
            hidden = hidden * self.gate(positions)
        hidden = self.inner_dropout(hidden, training=training)
        return reshape_trailing(self.outer(hidden), 1, (self.outer.units,), like=inputs)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"intermediate_dim": self.intermediate_dim, "activation": self.activation, "dropout": self.dropout,
             "gated": self.gated, "use_bias": self.use_bias}
        )
        return config
