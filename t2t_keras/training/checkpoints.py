"""Checkpoints of model + optimizer during training: periodic saving and resuming.

Listing and averaging a run's checkpoints (§6.1) lives in `t2t_keras.runs`.

tf.train checkpoints are written file by file and only then named in the
`checkpoint` state file, which is replaced atomically; a run killed while
writing leaves the previous checkpoint as the latest one.
"""

import logging
import os
import time

import keras
import tensorflow as tf

logger = logging.getLogger(__name__)


class CheckpointManager:
    """Saves and restores `model` and `optimizer` (step, moments, schedule position) in `directory`.

    With several workers every worker must save (saving is a collective
    operation), but only the chief writes into `directory`; the others write
    into a private scratch directory (`is_chief=False`), as TensorFlow's
    multi-worker guide prescribes. All workers restore from `directory`.
    """

    def __init__(self, directory, model, optimizer, keep=5, is_chief=True, task_id=0, extra_state=None, refuse=None):
        # `extra_state`: more trackables by name, e.g. dropout seed states and the input position (resume.py).
        # `refuse`: `() -> reason or None`, asked before each save (divergence.DivergenceMonitor.refusal).
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **(extra_state or {}))
        self.model, self.extra_state, self.refuse = model, dict(extra_state or {}), refuse
        self.directory = str(directory)
        self.write_dir = self.directory if is_chief else os.path.join(self.directory, f".worker-{task_id}")
        self.keep = keep if is_chief else 1
        self.manager = self._listing()
        self.optimizer = optimizer

    def _listing(self):
        """The `tf.train.CheckpointManager` that writes and lists the checkpoints, with the directory's list as it
        is now (another manager of the run, a rollback's model, may have written since this one was made)."""
        return tf.train.CheckpointManager(self.checkpoint, self.write_dir, max_to_keep=self.keep)

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    def restore_latest(self):
        """Restores the newest checkpoint if there is one; returns its step (0 for a new run)."""
        self.manager = self._listing()
        path = tf.train.latest_checkpoint(self.directory)
        if path is None:
            return 0
        saved = {name.split("/")[0] for name, _ in tf.train.list_variables(path)}
        missing = sorted(set(self.extra_state) - saved)
        if missing:  # written by an earlier version: those parts start fresh
            logger.warning("%s holds no %s (written before they were saved): they start from their initial "
                           "values.", path, ", ".join(missing))
        present = {name: value for name, value in self.extra_state.items() if name not in missing}
        checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, **present)
        checkpoint.restore(path).assert_existing_objects_matched()
        logger.info("Resumed from %s (step %d).", path, self.step)
        return self.step

    def latest_checkpoint(self):
        """The newest checkpoint's path in the run's directory, or None."""
        return tf.train.latest_checkpoint(self.directory)

    def save(self):
        """Writes a checkpoint of the current step (once); returns its path, or None when it may not be written:
        after a diverging update (`refuse`), or with a weight that is not finite, so that the newest checkpoint is
        always a good one to go back to."""
        if self.manager.latest_checkpoint and self.manager.latest_checkpoint.endswith(f"-{self.step}"):
            return self.manager.latest_checkpoint
        reason = self.refuse() if self.refuse is not None else None
        if reason is None and not _finite(self.model.weights):
            reason = "a weight of the model is not finite"
        if reason is not None:
            logger.warning("No checkpoint written at step %d: %s.", self.step, reason)
            return None
        return self.manager.save(checkpoint_number=self.step)


def _finite(variables):
    """Whether every floating-point value of `variables` is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(v)) for v in variables if "float" in str(v.dtype)]
    return bool(tf.reduce_all(checks).numpy()) if checks else True


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Saves every `every_steps` steps or `every_minutes` minutes, whichever comes first, and at the end."""

    def __init__(self, manager, every_steps=1000, every_minutes=10.0):
        super().__init__()
        self.manager = manager
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60
        self._last_step = None
        self._last_time = None

    def on_train_begin(self, logs=None):
        self._last_step, self._last_time = self.manager.step, time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        step = self.manager.step
        if step - self._last_step >= self.every_steps or time.monotonic() - self._last_time >= self.every_seconds:
            self._save(step)

    def on_train_end(self, logs=None):
        self._save(self.manager.step)

    def _save(self, step):
        path = self.manager.save()
        if path is not None:
            logger.info("Saved checkpoint %s", path)
        self._last_step, self._last_time = step, time.monotonic()
