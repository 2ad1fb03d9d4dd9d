"""Checkpoints of model + optimizer during training: periodic saving and resuming.

Listing and averaging a run's checkpoints (§6.1) lives in `t2t_keras.runs`.

tf.train checkpoints are written file by file and only then named in the
`checkpoint` state file, which is replaced atomically; a run killed while
writing leaves the previous checkpoint as the latest one. The sha256 of a
checkpoint's files is recorded beside them (`checksums.record_checkpoint`)
by a thread while training goes on, so that a save does not wait for the
hashing (bench/bench_checkpoint_checksums.py measures both), finished before
the next save and at the end of training; a checkpoint that a crash left
without its record is read unchecked. A resume restores the newest
checkpoint whose files still match (`restore_latest`): a damaged one is
named in a warning and set aside. A save that fails (a full disk:
`DiskFullError`) removes what it wrote, so no file of an unnamed checkpoint
stays behind.
"""

import logging
import os
import pathlib
import shutil
import threading
import time

import keras
import tensorflow as tf

from t2t_keras.checksums import (
    CHECKPOINT_RECORD_SUFFIX,
    checkpoint_files,
    checkpoint_record_path,
    record_checkpoint,
    verify_checkpoint,
)
from t2t_keras.errors import CorruptFileError
from t2t_keras.files import reporting_full_disk
from t2t_keras.runs import DAMAGED_DIR, checkpoint_paths, checkpoint_step, weights_bytes

logger = logging.getLogger(__name__)


class CheckpointManager:
    """Saves and restores `model` and `optimizer` (step, moments, schedule position) in `directory`.

    With several workers every worker must save (saving is a collective
    operation), but only the chief writes into `directory`; the others write
    into a private scratch directory (`is_chief=False`), as TensorFlow's
    multi-worker guide prescribes. All workers restore from `directory`;
    the chief moves damaged checkpoints into its `DAMAGED_DIR`.
    """

    def __init__(self, directory, model, optimizer, keep=5, is_chief=True, task_id=0, extra_state=None, refuse=None):
        # `extra_state`: more trackables by name, e.g. dropout seed states and the input position (resume.py).
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **(extra_state or {}))
        # `refuse`: `() -> reason or None`, asked before each save (divergence.DivergenceMonitor.refusal).
        self.model, self.extra_state, self.refuse = model, dict(extra_state or {}), refuse
        self.directory, self.is_chief = str(directory), is_chief
        self.damaged_dir = pathlib.Path(directory) / DAMAGED_DIR
        self.write_dir = self.directory if is_chief else os.path.join(self.directory, f".worker-{task_id}")
        self.keep = keep if is_chief else 1
        self.manager = self._manager()
        self.optimizer = optimizer
        self._recording = None  # the thread recording the newest checkpoint's checksums

    def _manager(self):
        """TensorFlow's manager of the checkpoints in `write_dir`, from its state file as it is now (another
        manager of the run, a rollback's model, may have written since this one was made)."""
        return tf.train.CheckpointManager(self.checkpoint, self.write_dir, max_to_keep=self.keep)

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    def restore_latest(self):
        """Restores the newest whole checkpoint if there is one; returns its step (0 for a new run)."""
        self.wait()
        self.manager = self._manager()
        path = self._newest_whole()
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

    def _newest_whole(self):
        """The newest checkpoint of `directory` whose files match their checksums (one without a record, from an
        earlier version, counts as whole); the damaged ones after it are named and, by the chief, set aside."""
        paths, damaged = checkpoint_paths(self.directory), []
        for path in reversed(paths):
            try:
                verify_checkpoint(path, "")
            except CorruptFileError as error:
                damaged.append((path, error))
                continue
            break
        if len(damaged) == len(paths):
            if damaged:
                raise CorruptFileError(
                    f"No checkpoint of {self.directory} is whole: {' '.join(str(e) for _, e in damaged)} Restore "
                    "the checkpoints from a backup, or train into a new --run-dir.")
            return None
        for path, error in damaged:
            logger.warning("Skipping the checkpoint %s (step %d): %s", path, checkpoint_step(path), error)
        if damaged and self.is_chief:
            self._set_aside([path for path, _ in damaged], paths[:len(paths) - len(damaged)])
        return paths[len(paths) - len(damaged) - 1]

    def _set_aside(self, damaged, kept):
        """Moves the files of the `damaged` checkpoints into `damaged_dir` and names only `kept` in the state."""
        self.damaged_dir.mkdir(parents=True, exist_ok=True)
        for path in damaged:
            for file in checkpoint_files(path) + [checkpoint_record_path(path)]:
                if file.exists():
                    os.replace(file, self.damaged_dir / file.name)
        _write_state(self.directory, kept)
        self.manager = self._manager()
        logger.warning("Moved the damaged checkpoint(s) at step(s) %s into %s (delete them once looked at); "
                       "training resumes from %s.", ", ".join(str(checkpoint_step(p)) for p in damaged),
                       self.damaged_dir, kept[-1])

    def latest_checkpoint(self):
        """The newest checkpoint's path in the run's directory, or None."""
        return tf.train.latest_checkpoint(self.directory)

    def save(self):
        """Saves a checkpoint at the current step (once per step), its checksums recorded in the background;
        returns its path, or None when it may not be written: after a diverging update (`refuse`), or with a weight
        that is not finite, so that the newest checkpoint is always a good one to go back to."""
        if self.manager.latest_checkpoint and self.manager.latest_checkpoint.endswith(f"-{self.step}"):
            return self.manager.latest_checkpoint
        reason = self.refuse() if self.refuse is not None else None
        if reason is None and not _finite(self.model.weights):
            reason = "a weight of the model is not finite"
        if reason is not None:
            logger.warning("No checkpoint written at step %d: %s.", self.step, reason)
            return None
        self.wait()
        prefix = os.path.join(self.write_dir, f"ckpt-{self.step}")
        try:
            with reporting_full_disk(prefix, self._expected_bytes, self._kept_on_failure(),
                                     " (the size of the previous checkpoint)" if self.manager.latest_checkpoint
                                     else " (the size of the weights and optimizer state)"):
                path = self.manager.save(checkpoint_number=self.step)
        except BaseException:
            _remove_unnamed(prefix, self.manager.checkpoints)
            raise
        self._recording = _Recording(path, self.write_dir, list(self.manager.checkpoints))
        return path

    def wait(self):
        """Waits until the newest checkpoint's checksums are recorded; raises what recording them raised."""
        recording, self._recording = self._recording, None
        if recording is not None:
            recording.join()

    def _expected_bytes(self):
        """What the next checkpoint needs: the size of the newest one, or of the variables it will hold."""
        previous = self.manager.latest_checkpoint
        if previous:
            return sum(path.stat().st_size for path in checkpoint_files(previous))
        return weights_bytes(self.model.weights) + weights_bytes(self.optimizer.variables)

    def _kept_on_failure(self):
        previous = self.manager.latest_checkpoint
        if previous is None:
            return "Nothing of it was kept, and the run has no checkpoint yet."
        return (f"Nothing of it was kept: the newest checkpoint is still {os.path.basename(previous)} (step "
                f"{checkpoint_step(previous)}), and training resumes from it.")


def _finite(variables):
    """Whether every floating-point value of `variables` is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(v)) for v in variables if "float" in str(v.dtype)]
    return bool(tf.reduce_all(checks).numpy()) if checks else True


class _Recording(threading.Thread):
    """Records the checksums of the checkpoint `path` and removes those of checkpoints no longer `named`, beside
    the training (sha256 lets other threads run while it hashes); `join` raises what it raised."""

    def __init__(self, path, directory, named):
        super().__init__(name=f"checksums of {os.path.basename(path)}")  # not a daemon: finished before exit
        self.path, self.directory, self.named, self.error = path, directory, named, None
        self.start()

    def run(self):
        try:
            record_checkpoint(self.path)
            _remove_stale_records(self.directory, self.named)
        except BaseException as error:  # noqa: BLE001 - handed to the training thread by `join`
            self.error = error

    def join(self, timeout=None):
        super().join(timeout)
        if self.error is not None:
            raise self.error


def _write_state(directory, kept):
    """Rewrites the state file of `directory` to name the checkpoints `kept` (oldest first) and no other.

    TensorFlow's managers rewrite it only when they save; `update_checkpoint_state` is the public call that
    writes it (deprecated for that reason, with a log line silenced here). Names stay relative to the directory,
    so the run can move.
    """
    state = tf.train.get_checkpoint_state(directory)
    stamps = dict(zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps))
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        tf.compat.v1.train.update_checkpoint_state(
            directory, os.path.basename(kept[-1]), [os.path.basename(path) for path in kept],
            all_model_checkpoint_timestamps=[stamps.get(path, 0.0) for path in kept],
            last_preserved_timestamp=state.last_preserved_timestamp)
    finally:
        tf_logger.setLevel(level)


def _remove_unnamed(prefix, named):
    """Removes what a failed save of the checkpoint `prefix` left: its files and TensorFlow's temporary
    directory, unless the state file names that checkpoint (`named`: an earlier, whole save of it)."""
    prefix = pathlib.Path(prefix)
    if prefix.name in {os.path.basename(path) for path in named}:
        return
    for path in prefix.parent.glob(prefix.name + ".*"):
        path.unlink(missing_ok=True)
    for path in prefix.parent.glob(prefix.name + "_temp*"):
        shutil.rmtree(path, ignore_errors=True)


def _remove_stale_records(directory, named):
    """Removes the checksum records of checkpoints that TensorFlow's manager deleted (it keeps the last K)."""
    named = {os.path.basename(path) for path in named}
    for record in pathlib.Path(directory).glob("*" + CHECKPOINT_RECORD_SUFFIX):
        if record.name[:-len(CHECKPOINT_RECORD_SUFFIX)] not in named:
            record.unlink(missing_ok=True)


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
        self.manager.wait()  # the last checkpoint leaves training with its checksums

    def _save(self, step):
        path = self.manager.save()
        if path is not None:
            logger.info("Saved checkpoint %s", path)
        self._last_step, self._last_time = step, time.monotonic()
