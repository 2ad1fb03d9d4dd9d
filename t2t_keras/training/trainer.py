"""`t2t-keras train`: build everything from a config and run `model.fit` in a distribution strategy."""

import contextlib
import dataclasses
import logging
import time

import keras
import tensorflow as tf

from t2t_keras.adapters import add_adapters
from t2t_keras.build import build_model
from t2t_keras.config import replace
from t2t_keras.errors import ConfigError
from t2t_keras.fast_path import FastPath
from t2t_keras.runs import checkpoint_step
from t2t_keras.switches.clustering import set_auto_clustering, xla_auto_clustering
from t2t_keras.tasks import task_of
from t2t_keras.training.checkpoints import CheckpointManager
from t2t_keras.training.divergence import DivergenceMonitor
from t2t_keras.training.fitting import fit
from t2t_keras.training.guard import DivergenceGuard
from t2t_keras.training.init_from import copy_tokenizer, load_initial_weights
from t2t_keras.training.keep_best import BestState
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from t2t_keras.training.memory_fit import plan_memory
from t2t_keras.training.metrics import MaskedAccuracy, Perplexity, TokenCount
from t2t_keras.training.precision import choose_fusion, choose_jit, choose_precision
from t2t_keras.training.recovery import fit_segments, recovery_at, skipped_ranges
from t2t_keras.training.resume import (
    InputPosition,
    check_input_stream,
    check_replicas,
    random_state,
    record_precision,
    settle_precision,
)
from t2t_keras.training.schedule import make_optimizer
from t2t_keras.training.steps import set_fit_steps
from t2t_keras.training.strategy import make_strategy, worker_count, worker_identity, writes_run
from t2t_keras.training.unclustered import validation_in_graph_mode
from t2t_keras.training.wall_time import SessionClock, WallClock, append_record, format_breakdown, session_record

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainResult:
    run_dir: str
    start_step: int
    final_step: int
    seconds: float
    history: dict
    model: object = None  # the trained keras.Model
    timing: dict = None  # where the session's wall time went (its record in RUN/timing.json)


def _use_jit(config, strategy, precision):
    """XLA as configured (`auto`: see training/precision.py), unless several replicas share a CPU.

    XLA cannot place the variables of replicas on logical CPU devices.
    """
    if not choose_jit(config.training.jit_compile, precision):
        return False
    if strategy.num_replicas_in_sync > 1 and FastPath.detect().cpu_only:
        logger.warning("jit_compile is off: XLA does not support several replicas on logical CPU devices.")
        return False
    return True


def build_loss_and_metrics(model, task):
    """Builds the compiled loss and metrics on a dummy batch of `task`'s inputs.

    Under a distribution strategy `fit` otherwise builds them from a batch it
    averages across replicas, which turns token ids into floats and fails
    outright under MultiWorkerMirroredStrategy.
    """
    ids = tf.ones((1, 2), tf.int32)
    inputs = task.example_inputs(ids)
    logits = model(inputs)
    model.compute_loss(inputs, ids, logits)
    model.compute_metrics(inputs, ids, logits, None)
    model.reset_metrics()


def compile_model(config, strategy, guard=None, batch_split=1):
    """The Transformer, its optimizer (eq. 3 schedule), label-smoothed loss and metrics, under `strategy`.

    `guard`: a `guard.DivergenceGuard` every update goes through (None: Keras' own step). `batch_split`: parts
    each batch comes in (memory_fit.py), accumulated into one update with the micro-batches of
    training.gradient_accumulation_steps.
    """
    t, task = config.training, task_of(config)
    precision = choose_precision(t.mixed_precision)
    with strategy.scope():
        model = build_model(config.model, dtype=precision)
        if t.lora_rank is not None:  # only the adapters train (adapters.py)
            add_adapters(model, t.lora_rank)
        # Accumulation happens in the train step (training/accumulation.py), not in the optimizer.
        optimizer = make_optimizer(config.model.hidden_dim, t.warmup_steps, t.learning_rate_scale, t.adam_beta_1,
                                   t.adam_beta_2, t.adam_epsilon, constant=t.learning_rate)
        if model.dtype_policy.name == "mixed_float16":  # the resolved policy, whatever chose it
            # Dynamic loss scaling: a step with non-finite gradients is skipped and the scale halved
            # (counted by callbacks.SkippedUpdates). Built now, so checkpoints hold and restore the scale.
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        pad = config.model.special_ids.pad  # the model's padding id: weight 0 in the loss and the metrics
        loss = LabelSmoothedCrossEntropy(epsilon=t.label_smoothing, pad_id=pad)
        model.compile(
            optimizer=optimizer,
            loss=loss,
            # mlm counts the masked positions only: their sample weights, which Keras gives weighted metrics.
            **{"weighted_metrics" if task.weighted_metrics else "metrics": [MaskedAccuracy(pad), Perplexity(pad),
                                                                            TokenCount(pad)]},
            jit_compile=(jit := _use_jit(config, strategy, precision)),
        )
        # Recorded, not set: auto-clustering is process-wide; `train` turns it on for its own training.
        model.fuse_elementwise = choose_fusion(t.fuse_elementwise, model.dtype_policy.name, jit)
        build_loss_and_metrics(model, task)
    set_fit_steps(model, loss, t.gradient_accumulation_steps * batch_split,
                  multi_worker=isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), guard=guard)
    return validation_in_graph_mode(model)


@dataclasses.dataclass
class RunState:
    """Checkpointed beside model and optimizer: what an exact resume and keep-best need."""

    position: InputPosition  # micro-batches consumed
    best: BestState  # best dev value, its step, evaluations since (keep_best.py)
    skipped_updates: tf.Variable  # updates skipped for non-finite gradients (mixed_float16)

    def checkpointed(self, model):
        return {"random_state": random_state(model), "input_position": self.position.consumed,
                "best": self.best, "skipped_updates": self.skipped_updates}


@dataclasses.dataclass
class Training:
    """What one training session holds, set up once by `_set_up` and handed to each step of `train`; the model and
    what belongs to it are compiled again when a rollback changes how the run trains (`_compiled`)."""

    run: object  # the RunDirectory
    config: object  # the resolved config
    data: object  # the task's RunData
    state: RunState
    chief: bool  # the worker that writes the run's files
    task_id: int  # this worker's index
    strategy: object  # the tf.distribute strategy
    settled: object  # the config the model compiles from: precision, XLA and fusion settled (settle_precision)
    split: int  # parts each batch is split into to fit in memory (memory_fit.py); 1: none
    events: list  # RUN/divergence.jsonl as this session knows it (training/recovery.py)
    recovery: object = None  # the `recovery.Recovery` the model is compiled for, or None: the run's own settings
    # The session's compiled models, by their `Recovery.training_changes` (None: the run's own settings): each
    # `Training` with its model, guard, monitor and checkpoint manager, compiled once and kept for the next time.
    compiled: dict = dataclasses.field(default_factory=dict)
    model: object = None  # the compiled model
    guard: object = None  # its `guard.DivergenceGuard`
    monitor: object = None  # the `divergence.DivergenceMonitor` reading the guard
    manager: object = None  # the CheckpointManager

    @property
    def log_dir(self):
        """The run's TensorBoard folder; other workers write beside it (one writer per event file)."""
        return self.run.log_dir if self.chief else self.run.log_dir / f".worker-{self.task_id}"


def _setting(training, recovery):
    """What a model compiled for `recovery` differs in, as a key of `Training.compiled`."""
    return None if recovery is None else tuple(sorted(recovery.training_changes(training.settled.training).items()))


def _compiled(training, recovery):
    """`training` with its model compiled for `recovery` (None: the run's own settings), a divergence guard and
    monitor, and a checkpoint manager of that model (nothing restored yet); kept in `training.compiled`."""
    config = training.settled
    if recovery is not None:
        config = replace(config, training=recovery.training_changes(config.training))
    guard = DivergenceGuard.create(training.strategy, config.training)
    model = compile_model(config, training.strategy, guard, training.split)
    set_auto_clustering(model.fuse_elementwise)  # process-wide: `train` scopes it
    monitor = DivergenceMonitor(guard)
    manager = CheckpointManager(training.run.checkpoint_dir, model, model.optimizer, config.training.keep_checkpoints,
                                is_chief=training.chief, task_id=training.task_id,
                                extra_state={**training.state.checkpointed(model), **guard.checkpointed()},
                                refuse=monitor.refusal)
    compiled = dataclasses.replace(training, recovery=recovery, model=model, guard=guard, monitor=monitor,
                                   manager=manager)
    training.compiled[_setting(training, recovery)] = compiled
    return compiled


def _rebuild(training, recovery):
    """`(training, step)`: the run's model for `recovery` (compiled the first time, then taken again with its
    divergence record cleared), restored from the newest checkpoint."""
    kept = training.compiled.get(_setting(training, recovery))
    if kept is None:
        training = _compiled(training, recovery)
    else:
        kept.monitor.clear()
        training = dataclasses.replace(kept, recovery=recovery)
    return training, training.manager.restore_latest()


def _open(resolved):
    """`(strategy, data)` of a `ResolvedRun`, under the run's lock: a new run's config written (which makes the run;
    a run that exists has its config written by `_set_up`, once resuming has passed its checks), --init-from's
    tokenizer copied, the seed set, the strategy and data made."""
    run, config = resolved.run, resolved.config
    init_from = resolved.init_from
    check_float32_weights(config.model, f"--init-from {init_from.run}" if init_from is not None else run.path)
    if resolved.new and run.exists() and writes_run(config.training.strategy):  # made since by another command
        raise ConfigError(f"{run.path} was made by another command after this one read its settings: run the "
                          "command again to continue that run, or train into another --run-dir.")
    if not run.exists():
        run.save_config(config)
    if init_from is not None:
        copy_tokenizer(init_from, run, config)
    keras.utils.set_random_seed(config.training.seed)
    strategy = make_strategy(config.training.strategy)
    logger.info("Training on %d replica(s) with %s.", strategy.num_replicas_in_sync, type(strategy).__name__)
    data = task_of(config).load_data(run, config, strategy.num_replicas_in_sync, worker_count(strategy))
    return strategy, data


def check_float32_weights(model_config, where):
    """Refuses to train a model of bfloat16 weights (`model.weights_dtype`, an import with --precision bfloat16):
    an update much smaller than a weight is lost when it is rounded to bfloat16's 8 bits of mantissa, so training
    keeps float32 weights (and computes in bfloat16 with training.mixed_precision)."""
    if model_config.weights_dtype != "float32":
        raise ConfigError(f"{where} has {model_config.weights_dtype} weights (model.weights_dtype, an import with "
                          "--precision bfloat16), which are not trained: import the checkpoint with --precision "
                          "float32 to fine-tune.")


def _set_up(resolved):
    """`(Training, start step)` of a `resolved_run.ResolvedRun`: data, model and state built, the newest checkpoint
    restored; with no checkpoint yet, the weights of its `init_from` loaded."""
    run, config = resolved.run, resolved.config
    strategy, data = _open(resolved)
    precision, jit, fuse = settle_precision(run, config.training)
    settled = replace(config, training={"mixed_precision": precision, "jit_compile": jit, "fuse_elementwise": fuse})
    memory = plan_memory(settled, strategy.num_replicas_in_sync)  # refuses a step that cannot fit
    events = run.read_json_lines(run.divergence_path)
    state = RunState(InputPosition(config.training.gradient_accumulation_steps, skipped_ranges(events)), BestState(),
                     tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_updates"))
    checkpoints = run.checkpoint_paths()
    recovery = recovery_at(events, checkpoint_step(checkpoints[-1]) if checkpoints else 0)  # one under way
    training = _compiled(Training(run, config, data, state, *worker_identity(strategy), strategy, settled,
                                  memory.split, events), recovery)
    start = _restore(training.manager, training.model, run, resolved.init_from)
    if training.chief:  # a refused resume leaves the run's files as they were
        check_input_stream(run, data.stream, start)
        check_replicas(run, strategy.num_replicas_in_sync, start)
        run.save_config(config)
        run.write_json(run.data_path, data.provenance)
        run.record_tokenizer(config.data.tokenizer)
        record_precision(run, precision, jit, fuse)
        run.write_json(run.memory_path, memory.record())
    return training, start


def _restore(manager, model, run, init_from):
    """The step training starts at: the newest checkpoint's, restored; without one, 0 and `init_from`'s weights."""
    start = manager.restore_latest()
    if init_from is not None and start == 0:
        load_initial_weights(model, init_from, run)
    elif init_from is not None:
        logger.info("%s continues from its own checkpoint at step %d; --init-from %s is not read again.", run.path,
                    start, init_from.run)
    return start


def _already_done(training, start):
    """Why the run needs no more training (its step budget or its early-stopping patience), or None."""
    t, best = training.config.training, training.state.best
    if start >= t.train_steps:
        return f"training.train_steps={t.train_steps}"
    if t.eval_every_steps and best.exhausted(t.early_stopping_patience):
        return (f"its early-stopping patience ({int(best.stale.numpy())} evaluations without improvement, "
                f"training.early_stopping_patience={t.early_stopping_patience})")
    return None


def train(resolved, minutes=None, callbacks=None, verbose="auto"):
    """Trains (or continues) the run of `resolved`; returns a `TrainResult`.

    Running it again on the same directory resumes from the newest checkpoint
    with step, optimizer moments and schedule position restored (the newest one whose files are whole: a damaged
    one is set aside, `CheckpointManager.restore_latest`). The run is locked first (`runs.RunDirectory.lock`): a
    run that another live process writes is refused before anything is done. Of several workers, the chief takes
    the lock for them all; the others write only their own scratch directories.

    Args:
        resolved: a `resolved_run.ResolvedRun`: the run directory and the config it trains with, resolved once
            (`resolved_run.resolve_run`: for an existing run only its training and decoding sections may differ
            from the saved one; with `init_from`, a new run starts from that trained run's weights and
            vocabulary, see training/init_from.py, and a run with checkpoints of its own resumes from them).
        minutes: stop after this much training time.
        callbacks: more Keras callbacks (e.g. `inspect.RunAttentionSummary`);
            those with a true `chief_only` attribute run on the chief worker only.
        verbose: passed to `model.fit`; "auto" is Keras' progress bar on a terminal, and one
            log line per logging interval otherwise (`callbacks.ProgressLog`).

    Raises:
        TrainingDiverged: the loss diverged and training.on_divergence (or the rollbacks' limit) stopped the run.
    """
    with resolved.run.lock("train") if writes_run(resolved.config.training.strategy) else contextlib.nullcontext():
        return _train(resolved, minutes, callbacks, verbose)


@xla_auto_clustering()  # what _compiled sets for this run's training, undone on return or error
def _train(resolved, minutes, callbacks, verbose):
    session = SessionClock(WallClock("start-up"))
    training, start = _set_up(resolved)
    path = str(training.run.path)
    reason = _already_done(training, start)
    if reason:
        logger.info("%s has already reached %s.", path, reason)
        return TrainResult(path, start, start, 0.0, {}, training.model)
    began = time.monotonic()
    seconds_left = (lambda: None) if not minutes else (lambda: minutes * 60 - (time.monotonic() - began))
    training, history = fit_segments(
        training, start,
        lambda segment, step, until, left: fit(segment, step, until, left, callbacks, verbose, session),
        _rebuild, seconds_left)
    seconds = time.monotonic() - began
    timing = _timing(training, session, start)
    return TrainResult(path, start, training.manager.step, seconds, history, training.model, timing)


def _timing(training, session, start):
    """The session's timing record (`wall_time.session_record`): logged, and appended to RUN/timing.json."""
    record = session_record("train", session, start_step=start, final_step=training.manager.step)
    logger.info("\n".join(format_breakdown(record)))
    if training.chief:
        append_record(training.run, record)
    return record
