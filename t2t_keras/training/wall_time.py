"""Where a training session's wall time went: measured timers by part, written to RUN/timing.json and logged.

A `WallClock` is always timing exactly one part, so the parts never overlap and add up to the session's wall
time. `train` starts it in `start-up` (data, vocabulary, model, restoring the newest checkpoint); from `fit`'s
`on_train_begin` on, `SessionClock` moves it between

    compilation      a step that traced the train function or compiled XLA clusters (XLA, or the fused elementwise
                     ops of a graph-mode step) for a batch shape: the session's first step, and any step over
                     `COMPILING_FACTOR` times the median of the recent steady ones and over `COMPILING_SECONDS`
    training steps   every other step: `fit`'s train function, which reads the next batch and makes the update
                     (the batch is read inside the traced step, so waiting for input is part of a step)
    validation       `fit`'s pass over the dev split at each epoch end (`on_test_begin` to `on_test_end`, and from
                     the second on from the epoch's last step: `fit` makes the pass's iterator before `on_test_begin`;
                     a part timed inside it, such as the attention summaries of that step, is not the pass's)
    other            the rest: Keras between steps, the callbacks not named below, the end of `fit`

and the trainer's callbacks run inside their own part (`Timed`): `checkpoint saves`, `logging` (TensorBoard, progress
lines), `dev evaluation` (training.eval_every_steps), `quality points` (training.quality_every_minutes) and
`attention summaries`. A part entered inside another pauses it. Reading the clock is `time.monotonic()` in
Python: no step waits for it.

Each session appends one record to RUN/timing.json: its seconds by part, its steps and those charged to compilation,
each validation's seconds and the seconds from the session's start to some step counts (the time to step 50).
The main job appends its own record, with the session's parts and its own (main_job.py).
"""

import collections
import contextlib
import logging
import statistics
import time

import keras

logger = logging.getLogger(__name__)

# The parts in the order they are reported; a record holds those that took any time.
PARTS = ("start-up", "compilation", "training steps", "validation", "dev evaluation", "quality points",
         "checkpoint saves", "attention summaries", "logging", "averaging", "evaluation",
         "other corpora", "retrieval baseline", "export", "export start-up", "examples", "quality plot", "other")
MILESTONES = (1, 10, 50, 100, 200, 500, 1000, 2000, 5000, 10000)  # session steps whose elapsed seconds are kept
# A step is charged to compilation when it is the session's first, or takes over COMPILING_FACTOR times the median of
# the last RECENT_STEPS steady steps and over COMPILING_SECONDS: tracing and compiling XLA clusters for a new batch
# shape take tens of seconds, 50-500 steps' worth; steady steps of one session vary by far less.
COMPILING_FACTOR = 5.0
COMPILING_SECONDS = 1.0
RECENT_STEPS = 50


class WallClock:
    """Seconds by part, exclusive: the clock times one part at a time, starting with `part`; `clock` tells the time.

    `switch(name)` charges the time since the last switch to the current part and makes `name` current;
    `with clock.part(name):` does the same and switches back when the block ends.
    """

    def __init__(self, part="start-up", clock=time.monotonic):
        self._clock = clock
        self.began = self._since = clock()
        self.current = part
        self.seconds = collections.Counter()

    def switch(self, name):
        """Charges the time since the last switch to the current part and makes `name` current; returns the time."""
        now = self._clock()
        self.seconds[self.current] += now - self._since
        self.current, self._since = name, now
        return now

    @contextlib.contextmanager
    def part(self, name):
        outer = self.current
        self.switch(name)
        try:
            yield
        finally:
            self.switch(outer)

    def relabel(self, name):
        """Makes the current part `name` from its start (the time since the last switch goes to `name`)."""
        self.current = name

    def now(self):
        return self._clock()

    def elapsed(self):
        return self._clock() - self.began

    def stop(self):
        """The session's seconds in all, after charging the current part up to now."""
        self.switch(self.current)
        return self._since - self.began


class SessionClock(keras.callbacks.Callback):
    """Moves `clock` between compilation, training steps, validation and other during `fit`.

    It times `fit`'s train function, which reads the batch and steps on it. Put it first among the callbacks, so
    that the time of the others is not counted in a step.
    """

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.steps = 0
        self.compiled = []  # the session steps charged to compilation
        self.recent = collections.deque(maxlen=RECENT_STEPS)  # seconds of the last steady steps
        self.milestones = {}  # session step -> seconds since the session began
        self.validations = []  # {"step": optimizer updates, "seconds": ...}
        self._charged_before = 0.0  # seconds charged to validation before the current pass
        self._validates = False  # fit validates at each epoch end (known from the first validation on)

    def on_train_begin(self, logs=None):
        self.clock.switch("other")
        step = self.model.train_function

        def timed_step(iterator):
            began = self.clock.switch("training steps")
            try:
                return step(iterator)
            finally:
                self._charge(self.clock.now() - began)

        object.__setattr__(self.model, "train_function", timed_step)  # past Keras' attribute tracking

    def _charge(self, seconds):
        """Ends a step of `seconds`: compilation when it is the first or far slower than the steady ones."""
        self.steps += 1
        if self.steps == 1 or (seconds > COMPILING_SECONDS and self.recent
                                and seconds > COMPILING_FACTOR * statistics.median(self.recent)):
            self.clock.relabel("compilation")
            self.compiled.append(self.steps)
        else:
            self.recent.append(seconds)
        self.clock.switch("other")
        if self.steps in MILESTONES:
            self.milestones[self.steps] = round(self.clock.elapsed(), 2)

    def on_train_batch_end(self, batch, logs=None):
        if self._validates and batch + 1 == (self.params or {}).get("steps"):  # Keras now makes the dev pass's iterator
            self._begin_validation()

    def on_test_begin(self, logs=None):
        self._validates = True
        if self.clock.current != "validation":
            self._begin_validation()

    def _begin_validation(self):
        self.clock.switch("validation")
        self._charged_before = self.clock.seconds["validation"]

    def on_test_end(self, logs=None):
        self.clock.switch("other")
        step = int(self.model.optimizer.iterations.numpy())  # once a validation
        # The pass's own seconds: the parts timed inside it (the attention summaries and checkpoints of the epoch's
        # last step) are not the validation's.
        seconds = self.clock.seconds["validation"] - self._charged_before
        self.validations.append({"step": step, "seconds": round(seconds, 2)})


HOOKS = ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_train_batch_begin",
         "on_train_batch_end", "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end")


class Timed(keras.callbacks.Callback):
    """`callback` with each hook it implements timed as `part` of `clock`; its `chief_only` is kept."""

    def __init__(self, callback, clock, part):
        super().__init__()
        self.callback, self.clock, self.part = callback, clock, part
        self.chief_only = getattr(callback, "chief_only", False)
        for name in HOOKS:  # the hooks it leaves as Keras' no-ops are called as they are, untimed
            hook = getattr(callback, name)
            implemented = getattr(type(callback), name) is not getattr(keras.callbacks.Callback, name)
            setattr(self, name, self._timed(hook) if implemented else hook)

    def _timed(self, hook):
        def timed_hook(*args, **kwargs):
            outer = self.clock.current
            self.clock.switch(self.part)
            try:
                return hook(*args, **kwargs)
            finally:
                self.clock.switch(outer)

        return timed_hook

    def set_model(self, model):
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.callback.set_params(params)


def timed(callback, clock, part=None):
    """`callback` timed as `part` (default: its `time_part` attribute, else `other`), or as it is without a clock."""
    if clock is None:
        return callback
    return Timed(callback, clock, part or getattr(callback, "time_part", "other"))


def session_record(kind, clock, **fields):
    """The timing record of a session: `kind`, its seconds in all and by part (in `PARTS` order), timed by `clock`:
    a `WallClock`, or a `SessionClock` (with its steps, the steps charged to compilation, each validation and the
    seconds to some step counts)."""
    session = clock if isinstance(clock, SessionClock) else None
    clock = clock.clock if session is not None else clock
    seconds = clock.stop()
    record = {"kind": kind, "began": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - seconds)),
              "seconds": round(seconds, 2), **fields}
    named = [part for part in PARTS if part in clock.seconds] + sorted(set(clock.seconds) - set(PARTS))
    record["parts"] = {part: round(clock.seconds[part], 2) for part in named}
    if session is not None:
        record.update(steps=session.steps, compiling_steps=session.compiled, validations=session.validations,
                      seconds_to_step={str(step): value for step, value in sorted(session.milestones.items())})
    return record


def folded(record, part, session):
    """`record` with its `part` replaced by the parts of `session`, the record of what ran in it (a train session
    inside the main job); the time of `part` outside the session goes to `other`."""
    if session is None or part not in record["parts"]:
        return record
    parts = dict(record["parts"])
    outside = parts.pop(part) - session["seconds"]
    for name, seconds in session["parts"].items():
        parts[name] = round(parts.get(name, 0.0) + seconds, 2)
    parts["other"] = round(parts.get("other", 0.0) + outside, 2)
    named = [name for name in PARTS if name in parts] + [name for name in parts if name not in PARTS]
    fields = {key: session[key] for key in ("steps", "compiling_steps", "validations", "seconds_to_step")
              if key in session}
    return {**record, **fields, "parts": {name: parts[name] for name in named}}


def append_record(run, record):
    """Appends `record` to the run's timing records (RUN/timing.json, rewritten atomically)."""
    records = run.read_json(run.timing_path) or []
    run.write_json(run.timing_path, records + [record])


def previous_training_seconds(run):
    """The seconds of the run's earlier `train` sessions, by their timing records."""
    return sum(record["seconds"] for record in run.read_json(run.timing_path) or [] if record["kind"] == "train")


def format_breakdown(record):
    """Lines of where a record's wall time went: seconds and share of each part, the largest first."""
    total = max(record["seconds"], 1e-9)
    compiling = len(record.get("compiling_steps", ()))
    counts = {"compilation": (compiling, "step", "steps"), "validation": (len(record.get("validations", ())), "pass",
                                                                          "passes"),
              "training steps": (record.get("steps", 0) - compiling, "step", "steps")}
    lines = [f"where the {record['seconds'] / 60:.1f} min of this {record['kind']} went:"]
    for part, seconds in sorted(record["parts"].items(), key=lambda item: -item[1]):
        count, one, many = counts.get(part, (0, "", ""))
        counted = f"  ({count} {one if count == 1 else many})" if count else ""
        lines.append(f"  {part:<22}{seconds:9.1f} s {100 * seconds / total:5.1f}%{counted}")
    if record.get("seconds_to_step"):
        lines.append("  seconds to step " + ", ".join(f"{step}: {value:.0f}" for step, value in
                                                     record["seconds_to_step"].items()))
    return lines
