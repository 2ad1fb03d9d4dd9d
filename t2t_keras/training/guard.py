"""A diverging loss caught in the graph, at the update it happens, and that update not applied.

Every training step (`training.steps`) hands its loss and gradients to `DivergenceGuard.apply` in place of
`optimizer.apply_gradients`. Inside the step, with no value sent to the host, the guard finds

- a non-finite loss (NaN or Inf),
- a non-finite gradient norm (not under mixed_float16, where Keras' dynamic loss scaling owns non-finite
  gradients: it skips the update and halves the scale, `callbacks.SkippedUpdates`),
- a spike: a loss above the mean of the last `spike_window` good updates by more than `spike_deviations` of
  their standard deviations, once `spike_min_steps` of them are in the window;

and then skips the optimizer's update (a `tf.cond` around `optimizer.apply`, as Keras' `LossScaleOptimizer`
skips one) and records what it found in `event`, a small variable. The record is latched: no later update
applies until the host, which reads `event` at the end of each batch it already sees
(`divergence.DivergenceMonitor`), has dealt with it. The losses and the gradient norm are those of the global
batch: each replica's loss share and squared gradient norm are summed over the replicas in one all-reduce, so
every replica reaches the same verdict. On several replicas the gradient norm is the root of the replicas'
summed squared norms (on one, the gradient norm itself): it is non-finite exactly when some replica's is.

The window of good losses and its count are saved with every checkpoint (`checkpointed`), so a resumed run
tests spikes as an uninterrupted one does.
"""

import keras
import tensorflow as tf

from t2t_keras.keras_compat import maybe_merge_call
from t2t_keras.training.tf_loss import replica_sum

# What `event[0]` holds: 0 while training is sound.
NON_FINITE_LOSS, NON_FINITE_GRADIENT_NORM, SPIKE = 1, 2, 3
# event = [kind, loss, mean, standard deviation (of the window), gradient norm]
EVENT_SIZE = 5


def window_statistics(window, seen):
    """`(count, mean, standard deviation)` of the good losses in `window` (`seen` written so far, cyclically)."""
    size = tf.shape(window, out_type=tf.int64)[0]
    count = tf.minimum(seen, size)
    filled = tf.cast(tf.range(size) < count, tf.float32)
    divisor = tf.maximum(tf.cast(count, tf.float32), 1.0)
    mean = tf.reduce_sum(window * filled) / divisor
    variance = tf.reduce_sum(tf.square((window - mean) * filled)) / divisor
    return count, mean, tf.sqrt(variance)


def verdict(loss, gradient_norm, window, seen, deviations, min_steps):
    """`(kind, mean, standard deviation)`: kind 0 for a sound update, else what is wrong with it (see module).

    `deviations` None: no spike test.
    """
    count, mean, deviation = window_statistics(window, seen)
    spike = tf.constant(False)
    if deviations is not None:
        spike = (count >= min_steps) & (loss > mean + deviations * deviation)
    kind = tf.where(~tf.math.is_finite(loss), NON_FINITE_LOSS,
                    tf.where(~tf.math.is_finite(gradient_norm), NON_FINITE_GRADIENT_NORM,
                             tf.where(spike, SPIKE, 0)))
    return kind, mean, deviation


def _variable(value, name):
    """A variable every replica holds the same copy of, written in replica context from the first replica's value
    (each replica computes the same one)."""
    return tf.Variable(value, trainable=False, name=name, synchronization=tf.VariableSynchronization.ON_WRITE,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


class DivergenceGuard:
    """The in-graph check of each update; build it under the strategy's scope (`create`).

    Args:
        window: `training.spike_window`, good losses the spike test looks back on.
        deviations: `training.spike_deviations`, or None for no spike test.
        min_steps: `training.spike_min_steps`, good losses in the window before the spike test applies.
    """

    def __init__(self, window=100, deviations=6.0, min_steps=20):
        self.deviations, self.min_steps = deviations, min_steps
        self.window = _variable(tf.zeros([window], tf.float32), "divergence_window")
        self.seen = _variable(tf.constant(0, tf.int64), "divergence_seen")
        self.event = _variable(tf.zeros([EVENT_SIZE], tf.float32), "divergence_event")

    @classmethod
    def create(cls, strategy, training_config):
        """The guard of `training_config` (a `TrainingConfig`), its variables on `strategy`'s devices."""
        t = training_config
        with strategy.scope():
            return cls(t.spike_window, t.spike_deviations, t.spike_min_steps)

    def checkpointed(self):
        """What checkpoints hold of the guard: the window of good losses and their count (not `event`: no
        checkpoint is written after a bad update)."""
        return {"divergence_window": self.window, "divergence_seen": self.seen}

    def apply(self, optimizer, loss, gradients, variables):
        """In a train step (replica context), in place of `optimizer.apply_gradients(zip(gradients, variables))`:
        applies the update only when `loss` (this replica's share) and the gradients are sound."""
        check_norm = not isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        squared = tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32))) for g in gradients if g is not None]) \
            if check_norm else tf.constant(0.0)
        total = replica_sum(tf.stack([tf.cast(loss, tf.float32), squared]))  # one all-reduce of both
        loss, norm = total[0], tf.sqrt(total[1])
        kind, mean, deviation = verdict(loss, norm, self.window, self.seen, self.deviations, self.min_steps)
        sound = tf.equal(kind, 0) & tf.equal(self.event[0], 0.0)
        self._record(sound, kind, tf.stack([tf.cast(kind, tf.float32), loss, mean, deviation, norm]))
        _apply_if(sound, optimizer, gradients, variables)

    def _record(self, sound, kind, event):
        """A sound loss joins the window; the first unsound update is kept in `event` (later ones leave it)."""
        position = tf.math.floormod(self.seen, tf.shape(self.window, out_type=tf.int64)[0])
        added = tf.tensor_scatter_nd_update(self.window, position[None, None], event[1:2])
        self.window.assign(tf.where(sound, added, self.window))
        self.seen.assign_add(tf.cast(sound, tf.int64))
        first = tf.equal(self.event[0], 0.0) & tf.not_equal(kind, 0)
        self.event.assign(tf.where(first, event, self.event))

    def reset(self):
        """Clears a recorded event (from the host)."""
        self.event.assign(tf.zeros([EVENT_SIZE], tf.float32))


def _apply_if(sound, optimizer, gradients, variables):
    """`optimizer.apply(gradients, variables)` when `sound`, in a `tf.cond` a distribution strategy accepts.

    Under a strategy that synchronises through `merge_call` (MirroredStrategy on CPUs), an update inside a
    `tf.cond` in replica context would call `merge_call` in a branch, which tf.distribute refuses: the condition
    is then taken in cross-replica context and the update run for each replica inside it, as Keras'
    `LossScaleOptimizer` does. `sound` is the same on every replica (computed from all-reduced values).
    """

    def update(strategy, sound, gradients):
        if tf.distribute.in_cross_replica_context():
            sound = strategy.experimental_local_results(sound)[0]

            def apply():
                strategy.extended.call_for_each_replica(lambda g: optimizer.apply(g, variables), args=(gradients,))
        else:
            def apply():
                optimizer.apply(gradients, variables)
        tf.cond(sound, apply, lambda: None)

    maybe_merge_call(update, tf.distribute.get_strategy(), sound, gradients)
