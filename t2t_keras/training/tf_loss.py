"""The TensorFlow parts of the loss: the fused label-smoothed cross-entropy and the sum over `tf.distribute` replicas.

Only `loss.py` imports this module, on the TensorFlow backend, so the loss imports no TensorFlow under JAX or
PyTorch.
"""

import tensorflow as tf


def fused_smoothed_cross_entropy(y_true, logits, epsilon):
    """Per-token cross-entropy against the label-smoothed target, `(batch, length)` float32, in one fused op.

    With `a = 1 - ε - ε/(V-1)` on the gold token and `b = ε/(V-1)` on every token (the smoothed target, whose
    weights sum to `a + bV = 1`), the loss is `logsumexp(z) - a·z_gold - b·Σ_k z_k` and its gradient with respect
    to the logits is `softmax(z) - b - a·onehot(gold)`. Written out with a custom gradient, the step keeps only
    the logits (in their own dtype) and one float32 `logsumexp` per token: no float32 log-softmax of the whole
    `(batch, length, vocab)` tensor is stored for the backward pass, and the gradient takes a few passes over it
    instead of the chain of log-softmax, gather and sum gradients.
    """
    logits = tf.convert_to_tensor(logits)
    labels = tf.cast(y_true, tf.int32)
    vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
    uniform = epsilon / (vocab - 1.0) if epsilon > 0 else tf.constant(0.0)
    gold_weight = 1.0 - epsilon - uniform

    @tf.custom_gradient
    def fused(logits):
        z = tf.cast(logits, tf.float32)
        lse = tf.reduce_logsumexp(z, axis=-1)
        losses = lse - gold_weight * tf.gather(z, labels, batch_dims=len(labels.shape))
        if epsilon > 0:
            losses = losses - uniform * tf.reduce_sum(z, axis=-1)

        def grad(upstream):
            upstream = tf.cast(upstream, tf.float32)
            grads = (tf.exp(tf.cast(logits, tf.float32) - lse[..., None]) - uniform) * upstream[..., None]
            rows = tf.reshape(grads, [-1, tf.shape(logits)[-1]])  # minus a·upstream at each gold id, in place
            flat_labels = tf.reshape(labels, [-1])
            gold = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], axis=1)
            rows = tf.tensor_scatter_nd_sub(rows, gold, tf.reshape(gold_weight * upstream, [-1]))
            return tf.cast(tf.reshape(rows, tf.shape(logits)), logits.dtype)

        return losses, grad

    return fused(logits)


def replica_sum(value):
    """Sums a replica-local value over all replicas of the current `tf.distribute` strategy."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)
