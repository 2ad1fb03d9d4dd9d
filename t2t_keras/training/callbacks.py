"""Keras callbacks of a training run: step-level TensorBoard scalars, skipped updates, step and time limits."""

import logging
import time

import keras
import tensorflow as tf

logger = logging.getLogger(__name__)


class TrainingScalars(keras.callbacks.Callback):
    """Every `every_steps` steps writes loss, accuracy, perplexity, learning rate and target tokens/s.

    Steps are optimizer updates (`optimizer.iterations`), so curves continue
    seamlessly when a run is resumed. Under dynamic loss scaling (mixed_float16) also
    `loss_scale` and `skipped_updates` (the value of the `skipped_updates` variable).
    """

    def __init__(self, log_dir, every_steps=50, skipped_updates=None):
        super().__init__()
        self.log_dir = str(log_dir)
        self.every_steps = every_steps
        self.skipped_updates = skipped_updates
        self._writer = None
        self._tokens = 0.0
        self._time = None

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self._tokens, self._time = 0.0, time.monotonic()  # the token metric restarts every epoch

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every_steps or not logs:
            return
        now, tokens = time.monotonic(), float(logs.get("target_tokens", 0.0))
        speed = (tokens - self._tokens) / max(now - self._time, 1e-9)
        self._tokens, self._time = tokens, now
        optimizer = self.model.optimizer
        with self._writer.as_default(step=step):
            tf.summary.scalar("tokens_per_second", speed)
            # A tensor from the schedule, or a (mirrored) variable for a constant training.learning_rate.
            tf.summary.scalar("learning_rate", float(tf.convert_to_tensor(optimizer.learning_rate)))
            for name in ("loss", "masked_accuracy", "perplexity"):
                if name in logs:
                    tf.summary.scalar(name, float(logs[name]))
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                tf.summary.scalar("loss_scale", float(optimizer.dynamic_scale.numpy()))
                if self.skipped_updates is not None:
                    tf.summary.scalar("skipped_updates", float(self.skipped_updates.numpy()))
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()


class SkippedUpdates(keras.callbacks.Callback):
    """Counts `fit` steps that made no update in `counter` (a variable saved with the checkpoints).

    Under mixed_float16 dynamic loss scaling, a step whose gradients are not finite is
    skipped: the weights and `optimizer.iterations` stay, and the loss scale is halved.
    Each skip is logged with the new loss scale. An update the divergence guard held back
    (`diverged()` says why, or None) is not one of these: training/recovery.py deals with it.
    """

    def __init__(self, counter, diverged=None):
        super().__init__()
        self.counter = counter
        self.diverged = diverged
        self._before = None

    def on_train_batch_begin(self, batch, logs=None):
        self._before = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) != self._before:
            return
        if self.diverged is not None and self.diverged() is not None:
            return
        self.counter.assign_add(1)
        scale = getattr(self.model.optimizer, "dynamic_scale", None)
        logger.info("Update %d skipped: non-finite gradients%s; %d update(s) skipped in this run so far.",
                    self._before + 1, f" (loss scale lowered to {float(scale.numpy()):g})" if scale is not None
                    else "", int(self.counter.numpy()))

    def on_train_end(self, logs=None):
        if int(self.counter.numpy()):
            logger.info("%d update(s) skipped for non-finite gradients (dynamic loss scaling).",
                        int(self.counter.numpy()))


class StopAtStep(keras.callbacks.Callback):
    """Stops `fit` once the optimizer has made `train_steps` updates."""

    def __init__(self, train_steps):
        super().__init__()
        self.train_steps = train_steps

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self.train_steps:
            self.model.stop_training = True


class TimeLimit(keras.callbacks.Callback):
    """Stops `fit` after `minutes` of training (the main job's time budget)."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            self.model.stop_training = True


class ProgressLog(keras.callbacks.Callback):
    """One log line every `every_steps` updates: step, loss, target tokens/s and the time left.

    For output that is not a terminal (a log file, CI), where Keras' progress bar
    would redraw itself with carriage returns thousands of times per line.
    The time left is the sooner of `train_steps` at the recent speed and the
    `minutes` budget.
    """

    def __init__(self, every_steps, train_steps, minutes=None):
        super().__init__()
        self.every_steps = every_steps
        self.train_steps = train_steps
        self.seconds = None if not minutes else minutes * 60
        self._began = self._time = None
        self._step = self._tokens = 0

    def on_train_begin(self, logs=None):
        self._began = self._time = time.monotonic()
        self._step = int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        self._tokens = 0.0  # the token metric restarts every epoch

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every_steps or not logs or step == self._step:
            return
        now, tokens = time.monotonic(), float(logs.get("target_tokens", 0.0))
        speed = max(tokens - self._tokens, 0.0) / max(now - self._time, 1e-9)
        steps_per_second = (step - self._step) / max(now - self._time, 1e-9)
        left = (self.train_steps - step) / max(steps_per_second, 1e-9)
        if self.seconds is not None:
            left = min(left, self.seconds - (now - self._began))
        logger.info("step %d/%d  loss %.4f  %.0f target tokens/s  %s left", step, self.train_steps,
                    float(logs.get("loss", float("nan"))), speed, _duration(max(left, 0.0)))
        self._step, self._tokens, self._time = step, tokens, now

    def on_epoch_end(self, epoch, logs=None):
        scores = {name: value for name, value in (logs or {}).items()
                  if name.startswith("val_") and name != "val_target_tokens"}
        if scores:
            logger.info("validation after step %d: %s", int(self.model.optimizer.iterations.numpy()),
                        "  ".join(f"{name[4:]} {float(value):.4f}" for name, value in sorted(scores.items())))


def _duration(seconds):
    """`1h02m`, `4m05s` or `12s`."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
