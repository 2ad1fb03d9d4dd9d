"""Run directories and exports: their layout, the config they were made with, and loading what they hold.

Every part that opens a run (training, evaluation, export, inspection, the
CLI) goes through this module, so the layout is written down once:

    RUN/config.yaml         the resolved configuration (written once, checked on resume)
    RUN/tokenizer.model     the shared SentencePiece vocabulary (data.tokenizer: bpe, unigram)
    RUN/tokenizer.vocab     the shared WordPiece vocabulary (data.tokenizer: wordpiece)
    RUN/data.json           where the data came from (package versions, licence, counts)
    RUN/checkpoints/        tf.train checkpoints of model + optimizer (last K kept)
    RUN/averaged/           the average of the last N checkpoints (§6.1), as a .keras model
    RUN/best/               the best checkpoint by training.best_metric (model weights, `ckpt`) and
                            best.json (step, metric, value); written when training.eval_every_steps > 0
    RUN/logs/               TensorBoard event files (train/, validation/, attention/)

    EXPORT/                 a SavedModel (see `export.saved_model`)
    EXPORT/assets.extra/    the Keras model and tokenizer beside it, for inspection
"""

import json
import logging
import pathlib

import keras
import numpy as np
import tensorflow as tf
import yaml

from t2t_keras import config as config_lib
from t2t_keras.build import build_model
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.data.tokenizers import find_tokenizer, load_tokenizer, tokenizer_filename
from t2t_keras.errors import ConfigError, T2TError
from t2t_keras.files import save_keras_model_atomic, staged_directory, write_text_atomic

logger = logging.getLogger(__name__)

# Sections that must not change when a run is continued; training and decoding may.
FROZEN_SECTIONS = ("model", "data")
MODEL_SOURCES = ("auto", "averaged", "latest", "best")
AVERAGE_ENDS = ("last", "best")  # the newest checkpoint, or the best one (RUN/best/)
BEST_CHECKPOINT = "ckpt"  # RUN/best/ckpt.index, ckpt.data-*
INSPECTION_DIR = "assets.extra"  # TF Serving's place for files beside a SavedModel; it ignores them


class RunDirectory:
    """Paths and bookkeeping of one run directory."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.config_path = self.path / "config.yaml"
        self.tokenizer_path = self.path / "tokenizer.model"  # a SentencePiece run's; see `tokenizer_file`
        self.checkpoint_dir = self.path / "checkpoints"
        self.averaged_dir = self.path / "averaged"
        self.averaged_model_path = self.averaged_dir / "model.keras"
        self.best_dir = self.path / "best"
        self.log_dir = self.path / "logs"
        self.prepared_dir = self.path / "prepared"  # the training corpus as shards (data.pipeline: prepared)

    def exists(self):
        return self.config_path.exists()

    def load_config(self):
        if not self.exists():
            raise ConfigError(f"{self.path} is not a run directory (no config.yaml): train into it first.")
        return config_lib.from_dict(yaml.safe_load(self.config_path.read_text(encoding="utf-8")))

    def save_config(self, config):
        write_text_atomic(self.config_path, yaml.safe_dump(config.to_dict(), sort_keys=False))

    def resolve_config(self, config):
        """The config to train with: `config` for a new run; for an existing run, the saved one
        with the new training/decoding sections, after checking model and data did not change."""
        if not self.exists():
            self.save_config(config)
            return config
        saved = self.load_config()
        for section in FROZEN_SECTIONS:
            old, new = getattr(saved, section).__dict__, getattr(config, section).__dict__
            changed = {key: (old[key], new[key]) for key in old if old[key] != new[key]}
            if changed:
                details = ", ".join(f"{section}.{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                raise ConfigError(
                    f"{self.path} was created with a different {section} config ({details}). "
                    "Continue it with the same config, or train into a new --run-dir."
                )
        resolved = config_lib.replace(saved, training=config.training.__dict__, decoding=config.decoding.__dict__)
        self.save_config(resolved)
        return resolved

    def write_json(self, name, data):
        write_text_atomic(self.path / name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, name):
        path = self.path / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def checkpoint_paths(self):
        """The run's checkpoints, oldest first."""
        return checkpoint_paths(self.checkpoint_dir)

    def tokenizer_file(self, kind):
        """Where the run keeps its tokenizer of `kind` (its config's `data.tokenizer`)."""
        return self.path / tokenizer_filename(kind)

    def best_checkpoint(self):
        """`(path, info)` of the best checkpoint; `info` is best.json (step, metric, value)."""
        info = self.read_json("best/best.json")
        if info is None:
            raise T2TError(
                f"{self.path} has no best checkpoint ({self.best_dir} does not exist). It is written during training "
                "when dev evaluation is on: continue the run with --set training.eval_every_steps=N (dev BLEU every "
                "N updates; training.best_metric picks bleu or loss), or use the last checkpoints."
            )
        return str(self.best_dir / BEST_CHECKPOINT), info

    def write_best(self, model, info, directory=None):
        """Replaces RUN/best/ (or `directory`) atomically with `model`'s weights and best.json holding `info`."""
        with staged_directory(directory or self.best_dir, overwrite=True) as staging:
            tf.train.Checkpoint(model=model).write(str(staging / BEST_CHECKPOINT))
            write_text_atomic(staging / "best.json", json.dumps(info, indent=2, sort_keys=True) + "\n")

    def load_tokenizer(self):
        """The run's tokenizer, of its config's `data.tokenizer`, checked against the model's vocabulary size."""
        config = self.load_config()  # fails clearly when this is not a run directory
        path = self.tokenizer_file(config.data.tokenizer)
        if not path.exists():
            raise T2TError(f"{path} does not exist: train the run first (it writes the vocabulary).")
        tokenizer = load_tokenizer(path, config.data.tokenizer)
        check_vocab_size(tokenizer.vocab_size, config.model.vocab_size)
        return tokenizer


def checkpoint_paths(directory):
    """All checkpoints in `directory`, oldest first."""
    state = tf.train.get_checkpoint_state(str(directory))
    return list(state.all_model_checkpoint_paths) if state else []


def checkpoint_step(path):
    """The step a checkpoint path was written at (`.../ckpt-1200` -> 1200)."""
    return int(str(path).rsplit("-", 1)[-1])


def _new_model(config):
    return build_model(config.model)


def load_run_model(run_dir, source="auto"):
    """The trained model of a run.

    `source`: "averaged" (RUN/averaged/model.keras), "latest" (newest checkpoint), "best" (RUN/best/,
    see `RunDirectory.best_checkpoint`) or "auto": the averaged model when it includes the newest
    checkpoint, else the newest checkpoint.
    """
    if source not in MODEL_SOURCES:
        raise T2TError(f"source must be one of {MODEL_SOURCES}. Received: source={source!r}")
    run = RunDirectory(run_dir)
    config = run.load_config()
    if source == "best":
        path, _ = run.best_checkpoint()
        model = _new_model(config)
        tf.train.Checkpoint(model=model).restore(path).expect_partial()
        return model
    paths = run.checkpoint_paths()
    averaged = run.read_json("averaged/averaged.json")
    fresh = (averaged is not None and paths and averaged.get("ending", "last") == "last"
             and checkpoint_step(paths[-1]) in averaged["steps"])
    if source == "averaged" or (source == "auto" and fresh):
        return keras.models.load_model(run.averaged_model_path)
    if not paths:
        raise FileNotFoundError(f"{run.checkpoint_dir} holds no checkpoint: train the run first.")
    model = _new_model(config)
    tf.train.Checkpoint(model=model).restore(paths[-1]).expect_partial()
    return model


def average_checkpoints(model, paths):
    """Loads the element-wise mean of the model weights stored in `paths` into `model`.

    §6.1: the base models average the last 5 checkpoints, the big ones the last 20.
    Optimizer state is not read.
    """
    if not paths:
        raise ValueError("No checkpoints to average: train first, or check --run-dir.")
    checkpoint = tf.train.Checkpoint(model=model)
    total = None
    for path in paths:
        checkpoint.restore(path).expect_partial()
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([t / len(paths) for t in total])
    return model


def _checkpoints_to_average(run, last, ending):
    """`(paths, steps)` of the `last` checkpoints ending at the newest one or at the best one."""
    if ending not in AVERAGE_ENDS:
        raise T2TError(f"checkpoint must be one of {AVERAGE_ENDS}. Received: checkpoint={ending!r}")
    if ending == "best":
        best_path, info = run.best_checkpoint()
        earlier = [p for p in run.checkpoint_paths() if checkpoint_step(p) < info["step"]]
        earlier = earlier[max(0, len(earlier) - (last - 1)):] if last > 1 else []
        return earlier + [best_path], [checkpoint_step(p) for p in earlier] + [info["step"]]
    paths = run.checkpoint_paths()[-last:]
    return paths, [checkpoint_step(p) for p in paths]


def average_run(run_dir, last=None, checkpoint="last"):
    """Averages the last `last` checkpoints of a run (default: training.average_last) into RUN/averaged/.

    `checkpoint="best"` averages the best checkpoint (RUN/best/) and the `last - 1` kept checkpoints before it.
    """
    run = RunDirectory(run_dir)
    config = run.load_config()
    last = last or config.training.average_last
    paths, steps = _checkpoints_to_average(run, last, checkpoint)
    if not paths:
        raise FileNotFoundError(f"{run.checkpoint_dir} holds no checkpoint: train the run first.")
    if len(paths) < last:
        logger.warning("Averaging %d checkpoints: only that many are kept (training.keep_checkpoints).", len(paths))
    model = average_checkpoints(_new_model(config), paths)
    save_keras_model_atomic(model, run.averaged_model_path)
    run.write_json("averaged/averaged.json", {"checkpoints": [str(p) for p in paths], "steps": steps,
                                              "ending": checkpoint})
    logger.info("Averaged checkpoints at steps %s into %s", steps, run.averaged_model_path)
    return run.averaged_model_path


def load_run(run_dir, source="auto"):
    """`(model, tokenizer)` of a run directory (see `load_run_model` for `source`)."""
    run = RunDirectory(run_dir)
    tokenizer = run.load_tokenizer()  # also fails clearly when run_dir is not a run directory
    return load_run_model(run_dir, source), tokenizer


def write_inspection_files(export_dir, model, tokenizer):
    """The Keras model and the tokenizer beside a SavedModel, for inspection (`load_export`)."""
    extra = pathlib.Path(export_dir) / INSPECTION_DIR
    extra.mkdir(parents=True, exist_ok=True)
    model.save(extra / "model.keras")
    tokenizer.save(extra / tokenizer_filename(tokenizer.kind))


def load_export(export_dir):
    """`(model, tokenizer)` that a text export keeps in `assets.extra/` (see `write_inspection_files`)."""
    extra = pathlib.Path(export_dir) / INSPECTION_DIR
    if not (extra / "model.keras").exists():
        raise T2TError(
            f"{export_dir} holds no {INSPECTION_DIR}/model.keras: it is not a text export of t2t-keras "
            "export (ids-only exports carry no model for inspection). Use its run directory (--run-dir)."
        )
    return keras.models.load_model(extra / "model.keras"), load_tokenizer(find_tokenizer(extra))
