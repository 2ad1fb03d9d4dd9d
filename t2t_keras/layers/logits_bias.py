"""A trained bias on the output logits (Marian's `final_logits_bias`)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class LogitsBias(keras.layers.Layer):
    """Adds one trained float32 bias per vocabulary id to float32 logits.

    The paper's pre-softmax projection has no bias (§3.4); Marian's models have
    one (`final_logits_bias` in Hugging Face's checkpoints), added after the tied
    projection.

    Args:
        vocab_size: number of ids.

    Call arguments:
        logits: float32 `(..., vocab_size)`, or `(..., S)` with `ids`.
        ids: int32 `(S,)`: the logits are those of these ids only (a shortlist).

    Returns:
        float32 logits of the shape of `logits`.
    """

    def __init__(self, vocab_size, **kwargs):
        super().__init__(**kwargs)
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive. Received: vocab_size={vocab_size}")
        self.vocab_size = vocab_size

    def build(self, input_shape=None):
        # float32 like the logits it is added to, whatever the policy (a mixed-precision model's logits are float32)
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros", dtype="float32")

    def call(self, logits, ids=None):
        bias = self.bias if ids is None else ops.take(self.bias, ids, axis=0)
        return logits + bias

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size})
        return config
