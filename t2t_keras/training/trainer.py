"""`t2t-keras train`: build everything from a config and run `model.fit` in a distribution strategy."""

import dataclasses
import logging
import sys
import time

import keras
import tensorflow as tf

from t2t_keras.adapters import add_adapters
from t2t_keras.build import build_model
from t2t_keras.config import replace
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import ConfigError, DataError
from t2t_keras.fast_path import FastPath, set_auto_clustering, xla_auto_clustering
from t2t_keras.runs import open_run
from t2t_keras.tasks import task_of
from t2t_keras.training.accumulation import group_micro_batches
from t2t_keras.training.callbacks import ProgressLog, SkippedUpdates, StopAtStep, TimeLimit, TrainingScalars
from t2t_keras.training.checkpoints import CheckpointManager, PeriodicCheckpoint
from t2t_keras.training.init_from import adopt, copy_tokenizer, load_initial_weights
from t2t_keras.training.keep_best import BestState, DevEvaluator, KeepBest, sample_pairs
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from t2t_keras.training.metrics import MaskedAccuracy, Perplexity, TokenCount
from t2t_keras.training.multi_worker import per_worker_batches
from t2t_keras.training.precision import choose_fusion, choose_jit, choose_precision
from t2t_keras.training.quality import quality_curve
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
from t2t_keras.training.strategy import make_strategy, worker_count, worker_identity
from t2t_keras.training.unclustered import UnclusteredValidation, unclustered
from t2t_keras.training.wall_time import (
    SessionClock,
    WallClock,
    append_record,
    format_breakdown,
    previous_training_seconds,
    session_record,
    timed,
)

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


def compile_model(config, strategy):
    """The Transformer, its optimizer (eq. 3 schedule), label-smoothed loss and metrics, under `strategy`."""
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
        loss = LabelSmoothedCrossEntropy(epsilon=t.label_smoothing)
        model.compile(
            optimizer=optimizer,
            loss=loss,
            # mlm counts the masked positions only: their sample weights, which Keras gives weighted metrics.
            **{"weighted_metrics" if task.weighted_metrics else "metrics": [MaskedAccuracy(), Perplexity(),
                                                                            TokenCount()]},
            jit_compile=(jit := _use_jit(config, strategy, precision)),
        )
        # Process-wide, for the training that follows: `train` scopes it (`xla_auto_clustering`).
        set_auto_clustering(choose_fusion(t.fuse_elementwise, model.dtype_policy.name, jit))
        build_loss_and_metrics(model, task)
    return set_fit_steps(model, loss, t.gradient_accumulation_steps,
                         multi_worker=isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy))


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
    """What one training session holds, set up once by `_set_up` and handed to each step of `train`."""

    run: object  # the RunDirectory
    config: object  # the resolved config
    data: object  # the task's RunData
    model: object  # the compiled model
    state: RunState
    manager: object  # the CheckpointManager
    chief: bool  # the worker that writes the run's files
    task_id: int  # this worker's index

    @property
    def log_dir(self):
        """The run's TensorBoard folder; other workers write beside it (one writer per event file)."""
        return self.run.log_dir if self.chief else self.run.log_dir / f".worker-{self.task_id}"


def _set_up(config, run_dir, init_from=None):
    """`(Training, start step)`: the run's config resolved, data, model and state built, the newest checkpoint
    restored; with no checkpoint yet, the weights of `init_from` (an `init_from.InitSource`) loaded."""
    run = open_run(run_dir)
    if init_from is not None:
        config = adopt(config, init_from, run)
    config = run.resolve_config(config)  # saved below, once resuming has passed its checks
    if init_from is not None:
        copy_tokenizer(init_from, run, config)
    keras.utils.set_random_seed(config.training.seed)
    strategy = make_strategy(config.training.strategy)
    logger.info("Training on %d replica(s) with %s.", strategy.num_replicas_in_sync, type(strategy).__name__)
    data = task_of(config).load_data(run, config, strategy.num_replicas_in_sync, worker_count(strategy))
    precision, jit, fuse = settle_precision(run, config.training)
    model = compile_model(replace(config, training={"mixed_precision": precision, "jit_compile": jit,
                                                    "fuse_elementwise": fuse}), strategy)
    chief, task_id = worker_identity(strategy)
    state = RunState(InputPosition(config.training.gradient_accumulation_steps), BestState(),
                     tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_updates"))
    manager = CheckpointManager(run.checkpoint_dir, model, model.optimizer, config.training.keep_checkpoints,
                                is_chief=chief, task_id=task_id, extra_state=state.checkpointed(model))
    start = _restore(manager, model, run, init_from)
    if chief:  # a refused resume leaves the run's files as they were
        check_input_stream(run, data.stream, start)
        check_replicas(run, strategy.num_replicas_in_sync, start)
        config = run.save_config(config)
        run.write_json(run.data_path, data.provenance)
        record_precision(run, precision, jit, fuse)
    return Training(run, config, data, model, state, manager, chief, task_id), start


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


def _keep_best(training):
    """The `KeepBest` callback when training.eval_every_steps is set, else nothing."""
    t, data, model, run = training.config.training, training.data, training.model, training.run
    if not t.eval_every_steps:
        return []
    if data.dev is None:
        raise ConfigError("training.eval_every_steps needs a dev split: set data.dev_files (or use a corpus with "
                          "one), or set training.eval_every_steps=0.")
    pairs = sample_pairs(data.dev_pairs, t.eval_sentences, t.seed)
    request = GenerationRequest.from_config(training.config.decoding).updated(beam_size=t.eval_beam_size)
    evaluator = DevEvaluator(model, data.tokenizer, pairs, data.dev, data.dev_steps, model.loss, request,
                             jit_compile=model.jit_compile)
    best_dir = run.best_dir if training.chief else run.path / f".worker-{training.task_id}" / "best"  # collective
    return [KeepBest(unclustered(evaluator), training.state.best, lambda m, info: run.write_best(m, info, best_dir),
                     t.eval_every_steps, t.best_metric, t.early_stopping_patience, final_step=t.train_steps,
                     log_dir=training.log_dir / "eval", save_checkpoint=training.manager.save)]


def _quality_curve(training, clock):
    """On the chief, the `QualityCurve` when training.quality_every_minutes is set (quality.py), timed on `clock`."""
    if not training.chief:
        return []
    return [timed(callback, clock) for callback in quality_curve(
        training.run, training.config, training.model, training.data, clock.elapsed,
        previous_training_seconds(training.run))]


def _callbacks(training, minutes, extra, session, log_lines=False):
    """The trainer's own callbacks, then `extra`; on workers other than the chief, without `chief_only` ones.

    The input position comes first, so that a checkpoint taken after a step includes it.
    `log_lines`: a `ProgressLog` line every logging interval, in place of Keras' progress bar.
    `session`: the `SessionClock` that times the steps, first, and whose clock times the callbacks (wall_time.py).
    """
    t, state, clock = training.config.training, training.state, session.clock
    every_steps = max(1, min(100, t.steps_per_epoch // 4))
    callbacks = [state.position, SkippedUpdates(state.skipped_updates), UnclusteredValidation()] + [
        timed(callback, clock, "dev evaluation") for callback in _keep_best(training)] + [
        StopAtStep(t.train_steps),
        timed(PeriodicCheckpoint(training.manager, t.checkpoint_every_steps, t.checkpoint_every_minutes), clock,
              "checkpoint saves"),
        timed(TrainingScalars(training.log_dir / "train", every_steps=every_steps,
                              skipped_updates=state.skipped_updates), clock, "logging"),
        timed(keras.callbacks.TensorBoard(str(training.log_dir), write_graph=False), clock, "logging"),
    ] + _quality_curve(training, clock)
    if minutes:
        callbacks.append(TimeLimit(minutes))
    if log_lines and training.chief:
        callbacks.append(timed(ProgressLog(every_steps, t.train_steps, minutes), clock, "logging"))
    extra = [timed(callback, clock) for callback in extra or ()
             if training.chief or not getattr(callback, "chief_only", False)]
    return [session] + callbacks + extra


def _training_input(training, start):
    """The batches `fit` reads from `start` on, where the run stopped: one stream, or where each worker reads its
    own (prepared shards on several workers), a distributed dataset of the workers' streams."""
    data, steps = training.data, training.config.training.gradient_accumulation_steps
    position = training.state.position.position(start)
    if data.per_worker:
        return per_worker_batches(training.model.distribute_strategy, data, position, steps)
    batches = data.training_batches(position)
    # One fit step = one update = N micro-batches.
    return group_micro_batches(batches, steps) if steps > 1 else batches


def _fit(training, start, minutes, callbacks, verbose, session):
    """`model.fit` from `start` to training.train_steps (or the time limit), timed by the `SessionClock`
    `session`: the history."""
    t, data = training.config.training, training.data
    train_data = _training_input(training, start)
    log_lines = verbose == "auto" and not sys.stdout.isatty()
    try:
        return training.model.fit(
            train_data, epochs=-(-t.train_steps // t.steps_per_epoch) + 1, initial_epoch=start // t.steps_per_epoch,
            steps_per_epoch=t.steps_per_epoch, validation_data=data.dev, validation_steps=data.dev_steps or None,
            shuffle=False,  # the dataset is shuffled by the input pipeline
            callbacks=_callbacks(training, minutes, callbacks, session, log_lines), verbose=0 if log_lines else verbose,
        ).history
    except StopIteration:  # the training stream repeats forever unless it holds no batch at all
        raise DataError(f"The training data gave no batch: its pairs do not fill one batch of data.batch_tokens="
                        f"{training.config.data.batch_tokens} tokens. Lower data.batch_tokens or train on more "
                        "data.") from None


@xla_auto_clustering()  # what compile_model sets for this run's training, undone on return or error
def train(config, run_dir, minutes=None, callbacks=None, verbose="auto", init_from=None):
    """Trains (or continues) the run in `run_dir`; returns a `TrainResult`.

    Running it again on the same directory resumes from the newest checkpoint
    with step, optimizer moments and schedule position restored.

    Args:
        config: a `config.Config`; for an existing run only its training and
            decoding sections may differ from the saved one.
        run_dir: the run directory (see `t2t_keras.runs`), or an open `RunDirectory`.
        minutes: stop after this much training time.
        callbacks: more Keras callbacks (e.g. `inspect.RunAttentionSummary`);
            those with a true `chief_only` attribute run on the chief worker only.
        verbose: passed to `model.fit`; "auto" is Keras' progress bar on a terminal, and one
            log line per logging interval otherwise (`callbacks.ProgressLog`).
        init_from: an `init_from.InitSource`: a new run starts from that trained run's weights and vocabulary
            (see training/init_from.py); a run with checkpoints of its own resumes from them.
    """
    session = SessionClock(WallClock("start-up"))
    training, start = _set_up(config, run_dir, init_from)
    path = str(training.run.path)
    reason = _already_done(training, start)
    if reason:
        logger.info("%s has already reached %s.", path, reason)
        return TrainResult(path, start, start, 0.0, {}, training.model)
    began = time.monotonic()
    history = _fit(training, start, minutes, callbacks, verbose, session)
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
