"""What a run does about a diverging loss (`training.on_divergence`): stop, or roll back and recover.

A run trains in segments, each a `model.fit` of one compiled model:

- a divergence (training/guard.py, caught by `divergence.DivergenceMonitor`) ends a segment. With `stop`, or
  with nothing to roll back to, or after `training.max_rollbacks` rollbacks to the same checkpoint (no newer
  checkpoint was written between them: no progress), the run stops with `TrainingDiverged`: the step, what was
  found, and the last good checkpoint, which is intact. With `rollback` the run returns to its newest checkpoint,
  leaves the batch of the unsound update out of its training stream (`resume.InputPosition.skip`: the positions
  keep counting the stream's batches, so resuming stays exact), and trains the next `training.rollback_steps`
  updates in float32 (a mixed_bfloat16 run: Marian's fallback from 16-bit to 32-bit training) or at
  `training.rollback_learning_rate_factor` times the learning rate (float32 and mixed_float16 runs);
- a recovery segment ends at its last step with a checkpoint, and the run goes on with its own settings.

Everything a resumed run needs to continue the same way is in RUN/divergence.jsonl: the batches skipped
(`skipped_ranges`) and the recovery under way (`recovery_at`), read when `train` starts.
"""

import logging
from typing import NamedTuple, Optional

from t2t_keras.errors import T2TError
from t2t_keras.runs import checkpoint_step
from t2t_keras.training.divergence import record

logger = logging.getLogger(__name__)


class TrainingDiverged(T2TError):
    """Training stopped on a diverging loss; the message says where, what was found and what to do."""


class Recovery(NamedTuple):
    """Updates after a rollback, up to `until` (exclusive of nothing: the checkpoint at `until` ends them), in
    `mixed_precision` (float32) or at `learning_rate_factor` times the rate."""

    until: int
    mixed_precision: Optional[str] = None
    learning_rate_factor: Optional[float] = None

    def as_record(self):
        changed = ({"mixed_precision": self.mixed_precision} if self.mixed_precision is not None
                   else {"learning_rate_factor": self.learning_rate_factor})
        return {"until_step": self.until, **changed}

    @classmethod
    def from_record(cls, record):
        return cls(record["until_step"], record.get("mixed_precision"), record.get("learning_rate_factor"))

    def training_changes(self, training_config):
        """The `training` section's values that differ in the recovery: precision, or the learning rate."""
        if self.mixed_precision is not None:
            return {"mixed_precision": self.mixed_precision}
        t, factor = training_config, self.learning_rate_factor
        if t.learning_rate is not None:
            return {"learning_rate": t.learning_rate * factor}
        return {"learning_rate_scale": t.learning_rate_scale * factor}


def skipped_ranges(events):
    """`{start: end}` of the micro-batch ranges the run's rollbacks left out of its stream (RUN/divergence.jsonl)."""
    return {start: end for start, end in (e["skipped_micro_batches"] for e in events if e["action"] == "rollback")}


def recovery_at(events, step):
    """The `Recovery` a run resumed at `step` is in, or None: the last rollback's, when `step` lies inside it."""
    rollbacks = [e for e in events if e["action"] == "rollback"]
    if not rollbacks:
        return None
    last = rollbacks[-1]
    return Recovery.from_record(last["recovery"]) if last["rolled_back_to"] <= step < last["recovery"]["until_step"] \
        else None


def recovery_for(training_config, precision, checkpoint):
    """The `Recovery` after a rollback to step `checkpoint` of a run trained in `precision`."""
    until = checkpoint + training_config.rollback_steps
    if precision == "mixed_bfloat16":
        return Recovery(until, mixed_precision="float32")
    return Recovery(until, learning_rate_factor=training_config.rollback_learning_rate_factor)


def why_stop(training_config, events, checkpoint):
    """Why a divergence stops the run rather than rolling it back to step `checkpoint` (None: no checkpoint yet),
    as the end of a sentence; None when it rolls back."""
    t = training_config
    if t.on_divergence == "stop":
        return "training.on_divergence=stop"
    if checkpoint is None:
        return ("there is no checkpoint to roll back to yet (the first is written at training.checkpoint_every_steps="
                f"{t.checkpoint_every_steps} or every {t.checkpoint_every_minutes:g} minutes)")
    trailing = 0
    for event in reversed(events):
        if event["action"] != "rollback" or event["rolled_back_to"] != checkpoint:
            break
        trailing += 1
    if trailing >= t.max_rollbacks:
        return (f"{trailing} rollbacks to the checkpoint of step {checkpoint} have not got past it "
                f"(training.max_rollbacks={t.max_rollbacks})")
    return None


def stop_message(run, event, reason, checkpoint):
    """The `TrainingDiverged` message: where, what, why the run stops, the last good checkpoint, and the fix."""
    kept = (f"Its last good checkpoint, step {checkpoint} in {run.checkpoint_dir}, is intact."
            if checkpoint is not None else "It has no checkpoint.")
    return (f"Training of {run.path} diverged at step {event.step}: {event.describe()}. It stops, as {reason}. "
            f"{kept} Lower the learning rate (training.learning_rate_scale, or a longer training.warmup_steps) or, "
            "in mixed precision, train in float32 (training.mixed_precision=float32); with "
            "training.on_divergence=rollback the run goes back to its last checkpoint, skips the batch and goes on "
            "with a lower rate (or float32) for training.rollback_steps updates.")


def after_divergence(training, event, rebuild):
    """Stops the run (`TrainingDiverged`) or rolls it back: returns `(training, start)` of the next segment.

    `training.events` (RUN/divergence.jsonl as this session knows it) gets the event on every worker; the chief
    writes it. `rebuild(training, recovery)`: the run's model compiled for `recovery` and restored from its newest
    checkpoint, as `(training, step)`.
    """
    run, t = training.run, training.config.training
    latest = training.manager.latest_checkpoint()
    checkpoint = checkpoint_step(latest) if latest else None
    reason = why_stop(t, training.events, checkpoint)
    if reason is not None:
        _record(training, event, {"action": "stop", "reason": reason})
        raise TrainingDiverged(stop_message(run, event, reason, checkpoint))
    position = training.state.position
    consumed = int(position.consumed.numpy())
    skipped = (consumed - position.micro_batches_per_step, consumed)
    recovery = recovery_for(t, training.settled.training.mixed_precision, checkpoint)
    _record(training, event, {"action": "rollback", "rolled_back_to": checkpoint,
                              "skipped_micro_batches": list(skipped), "recovery": recovery.as_record()})
    position.skip(*skipped)
    return rebuild(training, recovery)


def _record(training, event, action):
    training.events.append({**event.record(), **action})
    if training.chief:
        record(training.run, training.log_dir, event, action)


def fit_segments(training, start, fit, rebuild, seconds_left):
    """Trains from `start` until the run is done, in segments (see the module docstring).

    Args:
        training: the trainer's `Training`; its `recovery` is the one its model was compiled for.
        start: the step it starts at.
        fit: `(training, start, until, minutes) -> history`, one `model.fit` up to step `until` (`minutes`: the
            time budget left, or None).
        rebuild: see `after_divergence`.
        seconds_left: `() -> seconds` of the time budget left, or None without one.

    Returns:
        `(training, history)`: the last segment's `Training`, and the segments' histories joined.
    """
    histories, final = [], training.config.training.train_steps
    while True:
        left = seconds_left()
        if left is not None and left <= 0:
            return training, _joined(histories)
        until = final if training.recovery is None else min(final, training.recovery.until)
        histories.append(fit(training, start, until, None if left is None else left / 60))
        if training.monitor.event is not None:
            training, start = after_divergence(training, training.monitor.event, rebuild)
        elif training.recovery is not None and training.manager.step >= until and until < final:
            logger.info("Recovery after the rollback done at step %d: training goes on with the run's own settings.",
                        until)
            training, start = rebuild(training, None)
        else:
            return training, _joined(histories)


def _joined(histories):
    joined = {}
    for history in histories:
        for name, values in history.items():
            joined.setdefault(name, []).extend(values)
    return joined
