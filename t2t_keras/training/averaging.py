"""Checkpoint averaging (§6.1) and loading a run's trained model."""

import logging
import os

import keras

from t2t_keras.model import build_transformer
from t2t_keras.training.checkpoints import average_checkpoints, checkpoint_paths
from t2t_keras.training.run_directory import RunDirectory

logger = logging.getLogger(__name__)


def _step_of(path):
    return int(str(path).rsplit("-", 1)[-1])


def _save_atomically(model, path):
    tmp = path.with_name(".incomplete-" + path.name)  # Keras insists on the .keras suffix
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(tmp)
    os.replace(tmp, path)


def average_run(run_dir, last=None):
    """Averages the last `last` checkpoints of a run (default: training.average_last) into RUN/averaged/."""
    run = RunDirectory(run_dir)
    config = run.load_config()
    last = last or config.training.average_last
    paths = checkpoint_paths(run.checkpoint_dir)[-last:]
    if not paths:
        raise FileNotFoundError(f"{run.checkpoint_dir} holds no checkpoint: train the run first.")
    if len(paths) < last:
        logger.warning("Averaging %d checkpoints: only that many are kept (training.keep_checkpoints).", len(paths))
    model = build_transformer(config.model)
    model.build()
    average_checkpoints(model, paths)
    _save_atomically(model, run.averaged_model_path)
    steps = [_step_of(p) for p in paths]
    run.write_json("averaged/averaged.json", {"checkpoints": [str(p) for p in paths], "steps": steps})
    logger.info("Averaged checkpoints at steps %s into %s", steps, run.averaged_model_path)
    return run.averaged_model_path


def load_run_model(run_dir, source="auto"):
    """The trained model of a run.

    `source`: "averaged" (RUN/averaged/model.keras), "latest" (newest checkpoint)
    or "auto": the averaged model when it includes the newest checkpoint, else the newest checkpoint.
    """
    import tensorflow as tf

    run = RunDirectory(run_dir)
    config = run.load_config()
    paths = checkpoint_paths(run.checkpoint_dir)
    averaged = run.read_json("averaged/averaged.json")
    fresh = averaged is not None and paths and _step_of(paths[-1]) in averaged["steps"]
    if source == "averaged" or (source == "auto" and fresh):
        return keras.models.load_model(run.averaged_model_path)
    if not paths:
        raise FileNotFoundError(f"{run.checkpoint_dir} holds no checkpoint: train the run first.")
    model = build_transformer(config.model)
    model.build()
    tf.train.Checkpoint(model=model).restore(paths[-1]).expect_partial()
    return model
