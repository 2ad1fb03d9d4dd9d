"""One `model.fit` of a run: its input from the run's position on, its callbacks, and the fit itself.

`train` (trainer.py) calls `fit` once, or once a segment when a diverging loss splits the run
(training/recovery.py).
"""

import sys

import keras

from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import ConfigError, DataError
from t2t_keras.training.accumulation import group_micro_batches, split_batches
from t2t_keras.training.callbacks import ProgressLog, SkippedUpdates, StopAtStep, TimeLimit, TrainingScalars
from t2t_keras.training.checkpoints import PeriodicCheckpoint
from t2t_keras.training.keep_best import DevEvaluator, KeepBest, sample_pairs
from t2t_keras.training.multi_worker import per_worker_batches
from t2t_keras.training.quality import quality_curve
from t2t_keras.training.resume import stream_without
from t2t_keras.training.unclustered import UnclusteredValidation, unclustered
from t2t_keras.training.validation_input import validation_input
from t2t_keras.training.wall_time import previous_training_seconds, timed


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


def _callbacks(training, until, minutes, extra, session, log_lines=False):
    """The trainer's own callbacks, then `extra`; on workers other than the chief, without `chief_only` ones.

    The input position comes first, so that a checkpoint taken after a step includes it, then the divergence
    monitor, so that no checkpoint follows an unsound update. `until`: the step this fit stops at.
    `session`: the `SessionClock` that times the steps, first, and whose clock times the callbacks (wall_time.py).
    `log_lines`: a `ProgressLog` line every logging interval, in place of Keras' progress bar.
    """
    t, state, monitor, clock = training.config.training, training.state, training.monitor, session.clock
    every_steps = max(1, min(100, t.steps_per_epoch // 4))
    callbacks = [state.position, monitor, SkippedUpdates(state.skipped_updates, diverged=monitor.refusal),
                 UnclusteredValidation()] + [timed(callback, clock, "dev evaluation") for callback in
                                             _keep_best(training)] + [
        StopAtStep(until),
        timed(PeriodicCheckpoint(training.manager, t.checkpoint_every_steps, t.checkpoint_every_minutes), clock,
              "checkpoint saves"),
        timed(TrainingScalars(training.log_dir / "train", every_steps=every_steps,
                              skipped_updates=state.skipped_updates), clock, "logging"),
        timed(keras.callbacks.TensorBoard(str(training.log_dir), write_graph=False), clock, "logging"),
    ] + _quality_curve(training, clock)
    if minutes is not None:
        callbacks.append(TimeLimit(minutes))
    if log_lines and training.chief:
        callbacks.append(timed(ProgressLog(every_steps, t.train_steps, minutes), clock, "logging"))
    extra = [timed(callback, clock) for callback in extra or ()
             if training.chief or not getattr(callback, "chief_only", False)]
    return [session] + callbacks + extra


def training_input(training, start):
    """The batches `fit` reads from `start` on, where the run stopped: one stream, or where each worker reads its
    own (prepared shards on several workers), a distributed dataset of the workers' streams. The ranges a rollback
    skipped are left out; with the memory's batch split, each batch comes as that many micro-batches."""
    data, position = training.data, training.state.position
    at = position.position(start)
    steps = training.config.training.gradient_accumulation_steps
    if data.per_worker:
        return per_worker_batches(training.model.distribute_strategy, data, at, steps, position.skipped,
                                  training.split)
    batches = stream_without(data.training_batches, at, position.skipped)
    if training.split > 1:
        batches = split_batches(batches, training.split, training.model.distribute_strategy.num_replicas_in_sync)
    # One fit step = one update = N micro-batches (of each batch, its split's parts).
    micro_batches = steps * training.split
    return group_micro_batches(batches, micro_batches) if micro_batches > 1 else batches


def fit(training, start, until, minutes, callbacks, verbose, session):
    """`model.fit` from `start` to step `until` (or the time limit, `minutes`), timed by the `SessionClock`
    `session`: the history."""
    t, data = training.config.training, training.data
    train_data = training_input(training, start)
    dev = validation_input(training.model.distribute_strategy, data.dev)
    log_lines = verbose == "auto" and not sys.stdout.isatty()
    try:
        return training.model.fit(
            train_data, epochs=-(-t.train_steps // t.steps_per_epoch) + 1, initial_epoch=start // t.steps_per_epoch,
            steps_per_epoch=t.steps_per_epoch, validation_data=dev, validation_steps=data.dev_steps or None,
            shuffle=False,  # the dataset is shuffled by the input pipeline
            callbacks=_callbacks(training, until, minutes, callbacks, session, log_lines),
            verbose=0 if log_lines else verbose,
        ).history
    except StopIteration:  # the training stream repeats forever unless it holds no batch at all
        raise DataError(f"The training data gave no batch: its pairs do not fill one batch of data.batch_tokens="
                        f"{training.config.data.batch_tokens} tokens. Lower data.batch_tokens or train on more "
                        "data.") from None
