"""The residual connection and layer normalisation around every sublayer (§3.1, §5.4)."""

import keras

from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.layer_normalization import LayerNormalization
from t2t_keras.layers.rms_normalization import RMSNormalization


def normalization_layer(normalization, epsilon, dtype, name):
    """LayerNorm ("layer", §3.1) or T5's RMS normalisation ("rms")."""
    if normalization == "rms":
        return RMSNormalization(epsilon=epsilon, dtype=dtype, name=name)
    return LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package="t2t_keras")
class SublayerConnection(keras.layers.Layer):
    """LayerNorm(x + Dropout(Sublayer(x))), or its pre-LN variant.

    A block uses it in two steps, so the sublayer itself stays an ordinary layer:

        y = sublayer(connection.normalize(x))
        x = connection(x, y)

    Post-LN (the paper, `normalize_first=False`): `normalize` is the identity
    and the call returns LayerNorm(x + Dropout(y)). Pre-LN
    (`normalize_first=True`, the default of tensor2tensor, OpenNMT-tf and TF
    Model Garden): `normalize` applies LayerNorm and the call returns
    x + Dropout(y); the stack then needs a final LayerNorm.

    Args:
        dropout: P_drop, applied to the sublayer output before the residual sum (§5.4).
        normalize_first: pre-LN instead of the paper's post-LN.
        epsilon: LayerNorm epsilon.
        normalization: "layer" (LayerNorm) or "rms" (T5's `RMSNormalization`).

    Call arguments:
        residual: the sublayer input x.
        output: the sublayer output y.
        training: whether dropout is active.

    References:
        Vaswani et al., 2017, §3.1 and §5.4; Xiong et al., 2020 (pre-LN).
    """

    def __init__(self, dropout=0.1, normalize_first=False, epsilon=1e-6, normalization="layer", **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
        self.dropout = dropout
        self.normalize_first = normalize_first
        self.epsilon = epsilon
        self.normalization = normalization
        self.output_dropout = Dropout(dropout, dtype=self.dtype_policy, name="dropout")
        self.layer_norm = normalization_layer(normalization, epsilon, self.dtype_policy, "layer_norm")

    def build(self, residual_shape, output_shape=None):
        self.layer_norm.build(residual_shape)

    def normalize(self, x):
        """The sublayer's input: LayerNorm(x) when pre-LN, x itself when post-LN."""
        return self.layer_norm(x) if self.normalize_first else x

    def call(self, residual, output, training=None):
        summed = residual + self.output_dropout(output, training=training)
        return summed if self.normalize_first else self.layer_norm(summed)

    def compute_output_shape(self, residual_shape, output_shape=None):
        return residual_shape

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout, "normalize_first": self.normalize_first, "epsilon": self.epsilon,
                       "normalization": self.normalization})
        return config
