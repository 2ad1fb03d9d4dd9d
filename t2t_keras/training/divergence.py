"""The host's side of a diverging loss: reading the guard's record once a batch, and what is written about it.

`DivergenceMonitor` reads the guard's `event` variable (training/guard.py) at the end of each batch `fit` reports,
which it does anyway, and stops `fit` when an update was found unsound. From then on the run's checkpoint
manager writes nothing (`refusal`), so the last checkpoint stays the last good one. What follows (a stop, or a
rollback) is training/recovery.py's; each event is logged as a WARNING, appended to RUN/divergence.jsonl
(`record`) and written to TensorBoard as the scalar `divergence_events` (the run's count so far) at its step.
"""

import dataclasses
import logging
import math
import time

import keras
import tensorflow as tf

from t2t_keras.training.guard import NON_FINITE_GRADIENT_NORM, NON_FINITE_LOSS, SPIKE

logger = logging.getLogger(__name__)


def _number(value):
    """`value` for a JSON file: a float, or "nan", "inf", "-inf" (JSON has no non-finite numbers)."""
    return float(value) if math.isfinite(value) else str(float(value))


def _name(value):
    """"NaN" or "Inf" (signed) for a non-finite value."""
    return "NaN" if math.isnan(value) else ("Inf" if value > 0 else "-Inf")


@dataclasses.dataclass(frozen=True)
class Divergence:
    """An unsound update: its step (the update it would have been) and what the guard found."""

    step: int
    kind: int  # guard.NON_FINITE_LOSS, NON_FINITE_GRADIENT_NORM or SPIKE
    loss: float  # the global batch's loss
    mean: float  # of the sound losses in the spike window
    deviation: float  # their standard deviation
    gradient_norm: float

    @classmethod
    def from_event(cls, step, event):
        """From the guard's `event` values `[kind, loss, mean, deviation, gradient norm]`."""
        kind, loss, mean, deviation, norm = (float(value) for value in event)
        return cls(step, int(kind), loss, mean, deviation, norm)

    @property
    def found(self):
        """A short name: nan_loss, inf_loss, nan_gradient_norm, inf_gradient_norm or spike."""
        if self.kind == SPIKE:
            return "spike"
        value = self.loss if self.kind == NON_FINITE_LOSS else self.gradient_norm
        return f"{'nan' if math.isnan(value) else 'inf'}_{'loss' if self.kind == NON_FINITE_LOSS else 'gradient_norm'}"

    def describe(self):
        """What was found, in words: `NaN loss`, `Inf gradient norm`, `a loss spike from 2.91 to 9.87 (...)`."""
        if self.kind == NON_FINITE_LOSS:
            return f"{_name(self.loss)} loss"
        if self.kind == NON_FINITE_GRADIENT_NORM:
            return f"{_name(self.gradient_norm)} gradient norm (loss {self.loss:.4g})"
        return (f"a loss spike from {self.mean:.4g} to {self.loss:.4g} (the mean of the recent sound updates and "
                f"this update's loss; their standard deviation {self.deviation:.3g})")

    def record(self):
        """The fields of RUN/divergence.jsonl that describe the event itself."""
        return {"step": self.step, "found": self.found, "description": self.describe(), "loss": _number(self.loss),
                "running_mean": _number(self.mean), "running_deviation": _number(self.deviation),
                "gradient_norm": _number(self.gradient_norm), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


class DivergenceMonitor(keras.callbacks.Callback):
    """Reads the guard's record at each batch end; on an unsound update, keeps it in `event` and stops `fit`.

    Put it before every callback that saves (the checkpoint manager asks `refusal` before each save).
    """

    def __init__(self, guard):
        super().__init__()
        self.guard = guard
        self.event = None  # the `Divergence` that stopped this `fit`

    def on_train_batch_end(self, batch, logs=None):
        if self.event is not None:
            return
        values = self.guard.event.numpy()
        if values[0]:
            # The update was not applied (nor any later one: the record is latched), so the step it would have
            # been is the next one.
            self.event = Divergence.from_event(int(self.model.optimizer.iterations.numpy()) + 1, values)
            self.model.stop_training = True

    def clear(self):
        """Forgets the event, here and in the guard, for another `fit` of the same model."""
        self.event = None
        self.guard.reset()

    def refusal(self):
        """Why no checkpoint may be written now, or None."""
        if self.event is None:
            return None
        return f"training diverged at step {self.event.step} ({self.event.describe()})"


def record(run, log_dir, event, action):
    """Logs `event` (a `Divergence`) as a WARNING, appends it with `action` (what was done: a dict with at least
    `action`) to RUN/divergence.jsonl, and writes the run's count of events to TensorBoard at its step."""
    entry = {**event.record(), **action}
    logger.warning("Training diverged at step %d: %s. %s", event.step, event.describe(), action_text(entry))
    run.append_json_line(run.divergence_path, entry)
    count = len(run.read_json_lines(run.divergence_path))
    writer = tf.summary.create_file_writer(str(log_dir / "train"))
    with writer.as_default(step=event.step):
        tf.summary.scalar("divergence_events", float(count))
    writer.close()


def action_text(entry):
    """What was done about an event, in words, from its RUN/divergence.jsonl record."""
    if entry["action"] == "stop":
        return "The run stops."
    recovery = entry["recovery"]
    how = (f"in {recovery['mixed_precision']}" if "mixed_precision" in recovery
           else f"at {recovery['learning_rate_factor']:g} times the learning rate")
    start, end = entry["skipped_micro_batches"]
    return (f"Rolled back to the checkpoint of step {entry['rolled_back_to']}, skipping micro-batches {start} to "
            f"{end - 1} of the training stream; training {how} until step {recovery['until_step']}.")
