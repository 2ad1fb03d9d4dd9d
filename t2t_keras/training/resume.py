"""What an exact resume needs beyond model and optimizer: dropout random state and input position.

The training stream is a fixed function of `training.seed` (seeded shuffle, deterministic
batching), so its position is one number: the micro-batches consumed, saved with every
checkpoint (`InputPosition`). A resumed run starts its stream there (`RunData.training_batches`):
in memory it skips that many micro-batches, re-reading them through the input pipeline, not
through the model; from prepared shards it seeks. The step alone would not do: under
mixed_float16 a step whose gradients overflow is skipped and does not advance
`optimizer.iterations`.
"""

import logging

import keras
import tensorflow as tf

from t2t_keras.errors import DataError
from t2t_keras.training.precision import AUTO, choose_fusion, choose_jit, choose_precision

logger = logging.getLogger(__name__)


def random_state(model):
    """The state variables of every Keras `SeedGenerator` in `model` (dropout), in a stable order.

    `tf.train.Checkpoint(model=model)` does not track them; a checkpoint that lists them
    makes the dropout masks after a resume those of an uninterrupted run.
    """
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


class InputPosition(keras.callbacks.Callback):
    """Counts the micro-batches `fit` consumed in `consumed`, a variable saved with each checkpoint.

    Put it before the checkpoint callback, so a checkpoint taken after a step includes it.
    `skipped`: `{start: end}` ranges of the stream that training leaves out (a rollback's unsound batch,
    training/recovery.py): the count jumps from `start` to `end`, so positions keep naming the stream's batches,
    and `stream_without` leaves the same ranges out of what `fit` reads.
    """

    def __init__(self, micro_batches_per_step=1, skipped=None):
        super().__init__()
        self.micro_batches_per_step = micro_batches_per_step
        self.skipped = dict(skipped or {})
        self.consumed = tf.Variable(-1, dtype=tf.int64, trainable=False, name="input_position")  # -1: unknown

    def skip(self, start, end):
        """Leaves micro-batches `start` to `end - 1` out from now on."""
        self.skipped[start] = end

    def _past_skipped(self, position):
        """`position`, or past the end of the skipped ranges it starts."""
        while position in self.skipped:
            position = self.skipped[position]
        return position

    def position(self, step):
        """Micro-batches consumed; for a checkpoint written before positions were saved, `step · N`."""
        consumed = int(self.consumed.numpy())
        position = self._past_skipped(consumed if consumed >= 0 else step * self.micro_batches_per_step)
        self.consumed.assign(position)
        return position

    def on_train_batch_end(self, batch, logs=None):
        if not self.skipped:
            self.consumed.assign_add(self.micro_batches_per_step)
            return
        # the micro-batches read come after any skipped range at the position (a checkpoint before the rollback)
        consumed = self._past_skipped(int(self.consumed.numpy())) + self.micro_batches_per_step
        self.consumed.assign(self._past_skipped(consumed))


def stream_without(read, position, skipped):
    """The training stream from micro-batch `position` on without the `skipped` ranges (`{start: end}`).

    `read(position)` is the stream from `position` on (`RunData.training_batches`); a position inside a skipped
    range starts at its end.
    """
    for start, end in sorted(skipped.items()):
        if start <= position < end:
            position = end
    later = sorted((start, end) for start, end in skipped.items() if start > position)
    if not later:
        return read(position)
    start, end = later[0]
    return read(position).take(start - position).concatenate(
        stream_without(read, end, {s: e for s, e in later[1:]}))


def check_replicas(run, replicas, step):
    """Logs when a run resumes on another replica count: batches then split differently (not exact)."""
    previous = run.read_json(run.replicas_path)
    if step > 0 and previous and previous.get("replicas") != replicas:
        logger.warning("Resuming at step %d on %d replica(s), trained on %d: the batches and random state are split "
                       "differently, so the rest of the run is not an exact continuation.",
                       step, replicas, previous.get("replicas"))
    run.write_json(run.replicas_path, {"replicas": replicas})
    return previous is None or previous.get("replicas") == replicas


# How the stream is split among replicas and workers: another split is logged, not refused.
SPLIT_KEYS = ("num_replicas", "num_workers", "sharding")


def check_input_stream(run, stream, step):
    """Refuses to resume at `step` on a training stream whose positions name other batches; records `stream`.

    `stream` (`RunData.stream`, RUN/input_stream.json) holds what positions depend on: the road, and for
    prepared shards the seed, batching, grouping and a digest of the preparation. Another replica or worker
    count is logged as not exact, like `check_replicas`.
    """
    previous = run.read_json(run.input_stream_path)
    if step > 0 and previous:
        changed = {key: (previous.get(key), value) for key, value in stream.items() if previous.get(key) != value}
        listed = {key: f"{key}={old!r} then, {new!r} now" for key, (old, new) in sorted(changed.items())}
        split = [text for key, text in listed.items() if key in SPLIT_KEYS]
        if split:
            logger.warning("Resuming at step %d with the training stream split differently (%s): the rest of the "
                           "run is not an exact continuation.", step, ", ".join(split))
        fixed = [text for key, text in listed.items() if key not in SPLIT_KEYS]
        if fixed:
            raise DataError(f"{run.path} trained {step} steps on another training stream ({', '.join(fixed)}), "
                            f"and its input position counts batches of that one. Restore what changed to continue "
                            "the run, or train into a new --run-dir.")
    run.write_json(run.input_stream_path, stream)


def settle_precision(run, training):
    """`(precision, jit, fuse)` for this session: `auto` is resolved once per run and kept in `RUN/precision.json`
    (by `record_precision`, once the session's checks have passed).

    A run resumed on other hardware (a CPU without bfloat16 units after one with them, say) goes on in the
    precision and compilation it started with, so the continuation stays exact. An explicit setting that
    differs from what the run used so far is honoured and logged as not exact.
    """
    previous = run.read_json(run.precision_path) or {}
    precision, jit, fuse = training.mixed_precision, training.jit_compile, training.fuse_elementwise
    if precision == AUTO and "mixed_precision" in previous:
        precision = previous["mixed_precision"]
        logger.info("training.mixed_precision=auto: %s, as this run chose when it started.", precision)
    else:
        precision = choose_precision(precision)
    if jit == AUTO and "jit_compile" in previous:
        jit = previous["jit_compile"]
    else:
        jit = choose_jit(jit, precision)
    same_step = (previous.get("mixed_precision"), previous.get("jit_compile")) == (precision, jit)
    if fuse == AUTO and "fuse_elementwise" in previous and same_step:
        fuse = previous["fuse_elementwise"]
    else:
        fuse = choose_fusion(fuse, precision, jit)
    for key, value in _chosen(precision, jit, fuse).items():
        if key in previous and previous[key] != value:
            logger.warning("training.%s is %s; this run trained with %s so far: the rest of the run is not an "
                           "exact continuation.", key, value, previous[key])
    return precision, jit, fuse


def record_precision(run, precision, jit, fuse):
    """Keeps this session's `settle_precision` choice in RUN/precision.json."""
    run.write_json(run.precision_path, _chosen(precision, jit, fuse))


def _chosen(precision, jit, fuse):
    return {"mixed_precision": precision, "jit_compile": jit, "fuse_elementwise": fuse}
