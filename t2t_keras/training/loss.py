"""Label-smoothed cross-entropy on sparse targets (§5.4), normalised by the global token count."""

import math

import keras
from keras import ops

from t2t_keras.errors import ConfigError

_MEAN = "mean_with_sample_weight"


def token_log_probs(y_true, logits):
    """Gold-token log-probabilities and the sum of all log-probabilities, in float32.

    Never builds a one-hot `(batch, length, vocab)` tensor.

    Args:
        y_true: int token ids, `(batch, length)`.
        logits: `(batch, length, vocab)` in any float dtype.

    Returns:
        `(gold, total)`, both `(batch, length)` float32: `log p(y_true)` and `Σ_k log p(k)`.
    """
    # float16 log-probabilities of a 32k vocabulary lose most of their precision. log p(k) = z_k - logsumexp(z):
    # one logsumexp per token, no log-softmax tensor of the whole vocabulary.
    z = ops.cast(logits, "float32")
    lse = ops.logsumexp(z, axis=-1)
    ids = ops.expand_dims(ops.cast(y_true, "int32"), axis=-1)
    gold = ops.squeeze(ops.take_along_axis(z, ids, axis=-1), axis=-1) - lse
    return gold, ops.sum(z, axis=-1) - ops.cast(ops.shape(z)[-1], "float32") * lse


def smoothed_cross_entropy(y_true, logits, epsilon):
    """Per-token cross-entropy against the label-smoothed target, `(batch, length)` float32.

    With `a = 1 - ε - ε/(V-1)` on the gold token and `b = ε/(V-1)` on every token (the smoothed target, whose
    weights sum to `a + bV = 1`), the loss is `logsumexp(z) - a·z_gold - b·Σ_k z_k`. On the TensorFlow backend it
    is one fused op with its own gradient (`tf_loss.fused_smoothed_cross_entropy`), which stores no float32
    log-softmax of the whole vocabulary; on JAX and PyTorch the same formula in `keras.ops`, differentiated by the
    backend (the same values, up to rounding).
    """
    if keras.backend.backend() == "tensorflow":
        from t2t_keras.training.tf_loss import fused_smoothed_cross_entropy  # TensorFlow only

        return fused_smoothed_cross_entropy(y_true, logits, epsilon)
    z = ops.cast(logits, "float32")
    uniform = epsilon / (z.shape[-1] - 1.0) if epsilon > 0 else 0.0
    lse = ops.logsumexp(z, axis=-1)
    ids = ops.expand_dims(ops.cast(y_true, "int32"), axis=-1)
    losses = lse - (1.0 - epsilon - uniform) * ops.squeeze(ops.take_along_axis(z, ids, axis=-1), axis=-1)
    if epsilon > 0:
        losses = losses - uniform * ops.sum(z, axis=-1)
    return losses


def token_weights(y_true, pad_id, sample_weight=None):
    """float32 `(batch, length)` weights: 0 where `y_true == pad_id`, times `sample_weight`.

    `sample_weight` may be per token `(batch, length)` or per sequence `(batch,)`.
    """
    weights = ops.ones(ops.shape(y_true), "float32")
    if pad_id is not None:
        weights = ops.cast(ops.not_equal(ops.cast(y_true, "int32"), pad_id), "float32")
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        if len(sample_weight.shape) == len(y_true.shape) + 1:  # (batch, length, 1)
            sample_weight = ops.squeeze(sample_weight, axis=-1)
        if len(sample_weight.shape) == 1:  # one weight per sequence
            sample_weight = ops.expand_dims(sample_weight, axis=-1)
        weights = weights * sample_weight
    return weights


def sum_across_replicas(value):
    """Sums a replica-local value over all replicas of the current `tf.distribute` strategy.

    On JAX and PyTorch the value is returned as it is: Keras computes their loss over the whole batch of a step
    (JAX's `keras.distribution` shards one global computation), so it is already the global sum.
    """
    if keras.backend.backend() != "tensorflow":
        return value
    from t2t_keras.training.tf_loss import replica_sum  # TensorFlow only

    return replica_sum(value)


@keras.saving.register_keras_serializable(package="t2t_keras")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against label-smoothed targets, from sparse ids and logits.

    The smoothed target puts `1 - epsilon` on the gold token and `epsilon / (vocab - 1)` on
    each other token (tensor2tensor's rule; the paper's ε_ls = 0.1). Per token,

        CE = -(1 - ε - ε/(V-1)) · log p(gold) - ε/(V-1) · Σ_k log p(k),

    computed in float32 whatever the dtype of the logits, by `smoothed_cross_entropy` (one fused op
    with its own gradient, which stores no log-softmax of the whole vocabulary). `call()` returns the
    per-token losses `(batch, length)`.

    By default the value is the raw cross-entropy against the smoothed distribution, so
    `epsilon=0` gives the ordinary sparse cross-entropy. `normalize=True` subtracts the
    entropy of the smoothed target, as tensor2tensor does, so a perfect prediction of the
    smoothed distribution scores 0 (a KL divergence). The two differ by a constant and have
    the same gradient.

    Positions where `y_true == pad_id` get weight 0, with or without a `sample_weight`; any
    `sample_weight` multiplies that mask.

    Reduction. The default `"mean_with_sample_weight"` returns
    Σ weight · loss / Σ weight, the mean over non-padding tokens of the *global* batch.
    Under a `tf.distribute` strategy each replica divides its local sum by the weight total
    summed over all replicas; Keras sums the replicas' gradients and logs the sum of their
    losses, so one step on R replicas equals one step on one device with the same global
    batch, however unevenly padding falls between replicas. (Keras' own implementation of
    this reduction divides each replica by its local total and then by R, i.e. averages the
    replicas' means, which differs when replicas hold different numbers of tokens.) Any
    other Keras reduction (`"sum_over_batch_size"`, which divides by all positions
    including padding, `"sum"`, `None`) is applied by Keras unchanged, to the masked
    losses.

    Args:
        epsilon: ε_ls, the smoothing mass, `0 <= epsilon < 1`.
        pad_id: the padding id that gets weight 0, or `None` to rely on `sample_weight` only.
        normalize: subtract the entropy of the smoothed target distribution.
        reduction: a Keras loss reduction; see above.
        name: the loss name.

    Call arguments:
        y_true: int ids `(batch, length)`.
        y_pred: logits `(batch, length, vocab)`.
        sample_weight: optional `(batch, length)` or `(batch,)` weights.

    Returns:
        A scalar after reduction (`call()` alone gives `(batch, length)`).

    Example:

    >>> model.compile(optimizer, loss=LabelSmoothedCrossEntropy(epsilon=0.1))

    References:
        Vaswani et al., 2017, §5.4; Szegedy et al., 2016, "Rethinking the Inception
        Architecture for Computer Vision", §7.
    """

    def __init__(self, epsilon=0.1, pad_id=0, normalize=False, reduction=_MEAN, name="label_smoothed_cross_entropy"):
        super().__init__(name=name, reduction=reduction, dtype="float32")
        if not 0.0 <= epsilon < 1.0:
            raise ConfigError(f"epsilon must satisfy 0 <= epsilon < 1. Received: epsilon={epsilon}")
        if pad_id is not None and (not isinstance(pad_id, int) or pad_id < 0):
            raise ConfigError(f"pad_id must be None or a non-negative integer. Received: pad_id={pad_id}")
        self.epsilon = float(epsilon)
        self.pad_id = pad_id
        self.normalize = bool(normalize)

    def call(self, y_true, y_pred):
        vocab_size = y_pred.shape[-1]
        if vocab_size is not None and vocab_size < 2 and self.epsilon > 0:
            raise ValueError(f"Label smoothing needs a vocabulary of 2 or more. Received: vocab_size={vocab_size}")
        losses = smoothed_cross_entropy(y_true, y_pred, self.epsilon)  # (batch, length)
        if self.normalize:
            off = self.epsilon / (ops.cast(ops.shape(y_pred)[-1], "float32") - 1.0)
            losses = losses - self._target_entropy(off)
        return losses

    def _target_entropy(self, off):
        # H(q) = -(1-ε) log(1-ε) - (V-1) · ε/(V-1) · log(ε/(V-1)); 0 log 0 = 0.
        confident = 1.0 - self.epsilon
        entropy = -confident * math.log(confident)
        if self.epsilon > 0:
            entropy = entropy - self.epsilon * ops.log(off)
        return entropy

    def __call__(self, y_true, y_pred, sample_weight=None):
        y_true = ops.convert_to_tensor(y_true)
        if self.reduction != _MEAN:
            weights = token_weights(y_true, self.pad_id, sample_weight)
            return super().__call__(y_true, y_pred, sample_weight=weights)
        with keras.name_scope(self.name):
            weights = token_weights(y_true, self.pad_id, sample_weight)
            # A Keras mask on the logits (e.g. propagated from `mask_zero` embeddings) also applies.
            mask = getattr(y_pred, "_keras_mask", None)
            if mask is not None:
                weights = weights * ops.cast(mask, "float32")
            losses = self.call(y_true, y_pred)  # (batch, length)
            # Depends on the labels only; no gradient flows through it.
            total_weight = sum_across_replicas(ops.stop_gradient(ops.sum(weights)))
            return ops.divide_no_nan(ops.sum(losses * weights), total_weight)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon, "pad_id": self.pad_id, "normalize": self.normalize})
        return config
