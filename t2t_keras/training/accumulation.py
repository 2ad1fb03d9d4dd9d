"""Exact gradient accumulation: N micro-batches per optimizer update (fairseq `--update-freq`).

Keras' optimizer-side accumulation (`gradient_accumulation_steps` on the optimizer) puts
`apply_gradients` inside a `cond`, which under `MirroredStrategy` is a `merge_call` inside
a nested function and fails, and it averages per-micro-batch means, so each micro-batch
is normalised by its own token count. Here instead one `fit` step consumes N micro-batches:

1. `group_micro_batches` turns the stream of micro-batches into a stream of groups of N,
   laid out `(batch, N, length)` so a distribution strategy splits the sentences of every
   micro-batch between replicas (rows added to equalise batch sizes are all padding);
2. `make_accumulating_train_step` sums the gradients of the *summed* per-token losses of
   the N micro-batches, divides by the non-padding target tokens of all N micro-batches on
   all replicas, and makes one update (`apply_gradients`, through the divergence guard in a
   training run: `training.steps.set_fit_steps` makes it the model's step).

One step is therefore one optimizer update: `training.train_steps`, the eq. (3) schedule,
checkpoints (saved between steps, never inside an update), TensorBoard steps, `--minutes`
and `steps_per_epoch` all count updates.
"""

import tensorflow as tf
from keras import ops

from t2t_keras.keras_compat import loss_tracker, unscale_loss_for_distribution
from t2t_keras.training.loss import sum_across_replicas, token_weights


def _steps_second(tensor):
    """`(N, batch, ...)` -> `(batch, N, ...)`."""
    rank = len(tensor.shape)
    return tf.transpose(tensor, [1, 0] + list(range(2, rank)))


def group_micro_batches(dataset, steps):
    """Groups a dataset of `((source, target_in), target_out, weight)` micro-batches by `steps`.

    Micro-batches of different sizes and lengths are padded with zeros (the padding id, and
    weight 0) to the largest of their group; padding changes no loss, gradient or metric.

    Returns:
        A dataset of the same structure with `(batch, steps, length)` tensors.
    """
    return dataset.padded_batch(steps, drop_remainder=True).map(
        lambda x, y, w: ((_steps_second(x[0]), _steps_second(x[1])), _steps_second(y), _steps_second(w)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def split_batches(dataset, parts, multiple=1):
    """Each batch of `dataset` as `parts` micro-batches of its rows, in order: the memory's batch split
    (training/memory_fit.py), accumulated into the update of the whole batch by `group_micro_batches`.

    A part holds `ceil(rows / parts)` rows rounded up to a multiple of `multiple` (the replicas, which take
    equal shares of every micro-batch); the last parts hold what is left, possibly nothing (all padding once
    grouped).
    """

    def parts_of(*batch):
        rows = tf.shape(tf.nest.flatten(batch)[0])[0]
        size = -(-rows // (parts * multiple)) * multiple

        def part(index):
            index = tf.cast(index, tf.int32)
            return tf.nest.map_structure(lambda t: t[index * size:(index + 1) * size], batch)

        return tf.data.Dataset.range(parts).map(part)

    return dataset.flat_map(parts_of)


def _micro_batch(data, index):
    (source, target_in), target_out, weight = data
    return (source[:, index], target_in[:, index]), target_out[:, index], weight[:, index]


def _gradients(model, loss_fn, micro, total_tokens, variables):
    """Forward and backward pass of one micro-batch; its loss is its token-loss sum / `total_tokens`."""
    x, y, sample_weight = micro
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        weights = token_weights(y, loss_fn.pad_id, sample_weight)
        loss = ops.divide_no_nan(ops.sum(loss_fn.call(y, logits) * weights), total_tokens)
        scaled = model.optimizer.scale_loss(loss)  # dynamic loss scaling under mixed_float16
    gradients = tape.gradient(scaled, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    model.compute_metrics(x, y, logits, sample_weight=sample_weight)
    return loss, gradients


def make_accumulating_train_step(model, loss_fn, steps, update):
    """A `train_step` for `model` that makes one update from `steps` micro-batches.

    Args:
        model: the compiled model; its compiled metrics are updated on every micro-batch.
        loss_fn: the `LabelSmoothedCrossEntropy` whose per-token losses (`call`) are summed.
        steps: micro-batches per update; each `fit` element holds them as `(batch, steps, ...)`.
        update: `(loss, gradients, variables) -> None`, the update once the gradients are summed
            (`steps.updater`: `optimizer.apply_gradients`, or through the divergence guard).
    """

    def train_step(data):
        variables = model.trainable_variables
        weights = token_weights(data[1], loss_fn.pad_id, data[2])  # (batch, steps, length)
        total_tokens = sum_across_replicas(ops.sum(weights))  # all micro-batches, all replicas

        def body(index, loss_sum, accumulated):
            loss, gradients = _gradients(model, loss_fn, _micro_batch(data, index), total_tokens, variables)
            return index + 1, loss_sum + loss, [a + g for a, g in zip(accumulated, gradients)]

        zeros = [tf.zeros_like(v) for v in variables]
        _, loss, gradients = tf.while_loop(lambda index, *_: index < steps, body,
                                           (tf.constant(0), tf.constant(0.0), zeros))
        update(loss, gradients, variables)
        batch_size = tf.shape(data[1])[0]
        loss_tracker(model).update_state(unscale_loss_for_distribution(loss), sample_weight=batch_size)
        return model.get_metrics_result()

    return train_step

