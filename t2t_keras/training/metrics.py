"""Padding-aware token metrics: accuracy and perplexity, accumulated as sums and counts."""

import keras
from keras import ops

from t2t_keras.training.loss import token_log_probs, token_weights


class _TokenMetric(keras.metrics.Metric):
    """Accumulates Σ weight · value and Σ weight over non-padding tokens.

    Sums and counts, not a mean of batch means, so batches with different amounts of
    padding count in proportion to their tokens. The two variables are summed across
    replicas on read, so the result under a `tf.distribute` strategy equals the
    single-device result on the same global batch.

    Args:
        pad_id: the padding id excluded from the count (`None` to count every position).
        name: the metric name.
        dtype: the dtype of the result.

    Call arguments (`update_state`):
        y_true: int ids `(batch, length)`.
        y_pred: logits or probabilities `(batch, length, vocab)`.
        sample_weight: optional `(batch, length)` or `(batch,)` weights.
    """

    def __init__(self, pad_id=0, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def token_values(self, y_true, y_pred):
        """Per-token values `(batch, length)` to average; implemented by subclasses."""
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.convert_to_tensor(y_true)
        weights = token_weights(y_true, self.pad_id, sample_weight)  # (batch, length)
        values = self.token_values(y_true, y_pred)  # (batch, length)
        self.total.assign_add(ops.sum(values * weights))
        self.count.assign_add(ops.sum(weights))

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {"pad_id": self.pad_id, "name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="t2t_keras")
class MaskedAccuracy(_TokenMetric):
    """Fraction of non-padding tokens whose arg-max prediction is the gold token.

    Arguments: see `_TokenMetric`.

    References:
        Vaswani et al., 2017, §6.
    """

    def __init__(self, pad_id=0, name="masked_accuracy", dtype=None):
        super().__init__(pad_id=pad_id, name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        predicted = ops.argmax(y_pred, axis=-1)
        return ops.cast(ops.equal(ops.cast(predicted, "int32"), ops.cast(y_true, "int32")), "float32")

    def result(self):
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="t2t_keras")
class Perplexity(_TokenMetric):
    """exp of the mean un-smoothed cross-entropy per non-padding token.

    The cross-entropy is against the gold token alone (no label smoothing), so the value is
    comparable across smoothing settings; it is the per-token perplexity of the paper's
    Table 3 when the tokens are the same word pieces.

    Arguments: see `_TokenMetric`; `y_pred` may have any float dtype (computed in float32).

    References:
        Vaswani et al., 2017, §6.2 and Table 3.
    """

    def __init__(self, pad_id=0, name="perplexity", dtype=None):
        super().__init__(pad_id=pad_id, name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        gold, _ = token_log_probs(y_true, y_pred)
        return -gold

    def result(self):
        return ops.exp(ops.divide_no_nan(self.total, self.count))


@keras.saving.register_keras_serializable(package="t2t_keras")
class TokenCount(keras.metrics.Metric):
    """Number of non-padding target tokens seen since the last reset.

    Training-speed logging divides its increase by wall time (target tokens/s,
    the unit of the paper's batch sizes and of the benchmark tables).
    """

    def __init__(self, pad_id=0, name="target_tokens", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(ops.sum(token_weights(ops.convert_to_tensor(y_true), self.pad_id, sample_weight)))

    def result(self):
        return self.count + 0.0  # a copy: the variable itself would show later updates (validation)

    def reset_state(self):
        self.count.assign(0.0)

    def get_config(self):
        return {"pad_id": self.pad_id, "name": self.name, "dtype": self.dtype}
