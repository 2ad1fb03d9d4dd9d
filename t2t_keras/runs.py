"""Run directories and exports: their layout, the config they were made with, and loading what they hold.

Every part that opens a run (training, evaluation, export, inspection, the
CLI) goes through this module, and `RunDirectory` names every path of a run,
so the layout is written down once:

    RUN/config.yaml         the configuration, resolved before the run is opened (`resolved_run`: checked
                            against this file on resume) and stored here; data files inside the run are named
                            relative to it, so a copied or moved run finds them (`config_paths`)
    RUN/tokenizer.model     the shared SentencePiece vocabulary (data.tokenizer: bpe, unigram)
    RUN/tokenizer.vocab     the shared WordPiece vocabulary (data.tokenizer: wordpiece)
    RUN/data.json           where the data came from (package versions, licence, counts)
    RUN/replicas.json       the replica count of the last training (a resume on another count is not exact)
    RUN/precision.json      the precision, XLA and fusion choices `auto` resolved to (kept on resume)
    RUN/init_from.json      the trained run this one started from (`train --init-from`): its path, weights, steps
    RUN/pretrained.json     an imported checkpoint (`t2t-keras import`): its directory, name, the sha256 of each file
                            read, its decoding defaults (generation_config.json) and the languages chosen
    RUN/tokenizer.zip       an imported checkpoint's tokenizer (data.tokenizer: pretrained): its SentencePiece
                            models and vocabularies, and a manifest
    RUN/divergence.jsonl    one JSON line per divergence caught in training (training.on_divergence): its step,
                            what was found, what was done (stop, or the rollback, the batch skipped, the recovery)
    RUN/memory.json         the training step's memory estimate, the memory available and the batch split chosen
    RUN/shortlist.npz       the vocabulary shortlist (`t2t-keras shortlist`, data.shortlist), used by
                            `translate --shortlist` and `export --shortlist`
    RUN/distilled/          a student's training data (`t2t-keras distill`): the teacher's translations of its
                            training sources in numbered shards, their concatenation, the teacher's dev and test
                            splits, and distill.json (the teacher, its weights and its exact decoding settings)
    RUN/checkpoints/        tf.train checkpoints of model + optimizer (last K kept), each with the sha256 of its files
                            (ckpt-8.sha256.json, `checksums`); damaged/: checkpoints that failed that check,
                            set aside by `train` (it resumes from the newest one that passes)
    RUN/averaged/           the average of the last N checkpoints (§6.1): model weights (`ckpt`) and
                            averaged.json (the checkpoints and steps averaged)
    RUN/best/               the best checkpoint by training.best_metric (model weights, `ckpt`) and
                            best.json (step, metric, value); written when training.eval_every_steps > 0
    RUN/logs/               TensorBoard event files (train/, validation/, attention/)
    RUN/checksums.json      the sha256 of the tokenizer file, recorded by the session that wrote or first used it
    RUN/.lock, .lock.json   the lock of the one process writing the run, and its holder (`run_lock`)
    RUN/timing.json         where the wall time went: one record per `train` session and per main job, the
                            seconds of each part (training/wall_time.py)
    RUN/quality.json        dev BLEU and training loss of a small fixed dev sample against wall-clock minutes
                            (training.quality_every_minutes; training/quality.py)
    RUN/quality.png         those points drawn (the main job)
    RUN/baseline.json       the retrieval baseline's scores (the main job)
    RUN/report.json         the main job's report
    RUN/export/             the main job's SavedModel

Weights are tf.train checkpoints of the model in all three places (`checkpoints/`, `best/`,
`averaged/`), read the same way by `load_run_model`. A run with training.lora_rank set holds its adapters
there beside the frozen base weights; `load_run_model` merges them (adapters.py), so that decoding and
export see a model without adapters. An export is the exception: it carries
its model as a `.keras` file (`assets.extra/`), so that it opens without the run's config.

    EXPORT/                 a SavedModel (see `export.saved_model`)
    EXPORT/assets.extra/    the Keras model and tokenizer beside it, for inspection, weights.json
                            (which weights of which run it holds) and export.sha256.json (the sha256 of every other
                            file of the export, checked when it is loaded: `export.integrity`)
"""

import dataclasses
import hashlib
import json
import logging
import pathlib

import keras
import numpy as np
import tensorflow as tf
import yaml

from t2t_keras import config as config_lib
from t2t_keras import config_paths
from t2t_keras.adapters import add_adapters, has_adapters, merged_into
from t2t_keras.build import build_model
from t2t_keras.checksums import read_record as read_checksums
from t2t_keras.checksums import record_checkpoint, record_files, verify_checkpoint, verify_files
from t2t_keras.config import MODEL_SOURCES
from t2t_keras.data.shortlist import learn_shortlist, load_shortlist, save_shortlist
from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.data.tokenizers import find_tokenizer, load_tokenizer, tokenizer_filename
from t2t_keras.errors import ConfigError, MissingPathError, T2TError, check_applicable, check_task
from t2t_keras.files import staged_directory, write_text_atomic
from t2t_keras.run_lock import RunLock

logger = logging.getLogger(__name__)

DAMAGED_DIR = "damaged"  # RUN/checkpoints/damaged/: where `train` sets damaged checkpoints aside
AVERAGE_ENDS = ("last", "best")  # the newest checkpoint, or the best one (RUN/best/)
MODEL_CHECKPOINT = "ckpt"  # RUN/best/ckpt.index, RUN/averaged/ckpt.data-*: the model's weights alone
INSPECTION_DIR = "assets.extra"  # TF Serving's place for files beside a SavedModel; it ignores them


def _upgraded(saved):
    """A run's saved config in today's terms: runs saved before training.lora_rank took null for "off" hold 0."""
    training = (saved or {}).get("training") or {}
    if training.get("lora_rank") == 0:
        return {**saved, "training": {**training, "lora_rank": None}}
    return saved


class RunDirectory:
    """Every path of one run directory, its config (read once) and its bookkeeping files."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.config_path = self.path / config_paths.RUN_CONFIG_FILE
        self.data_path = self.path / "data.json"
        self.replicas_path = self.path / "replicas.json"
        self.precision_path = self.path / "precision.json"
        self.baseline_path = self.path / "baseline.json"
        self.report_path = self.path / "report.json"
        self.timing_path = self.path / "timing.json"  # wall time by part, a record per session
        self.quality_path = self.path / "quality.json"  # dev BLEU against wall-clock minutes
        self.quality_plot_path = self.path / "quality.png"  # the same, drawn
        self.checkpoint_dir = self.path / "checkpoints"
        self.damaged_checkpoint_dir = self.checkpoint_dir / DAMAGED_DIR  # checkpoints that failed their checksums
        self.averaged_dir = self.path / "averaged"
        self.averaged_info_path = self.averaged_dir / "averaged.json"
        self.best_dir = self.path / "best"
        self.best_info_path = self.best_dir / "best.json"
        self.log_dir = self.path / "logs"
        self.export_dir = self.path / "export"
        self.prepared_dir = self.path / "prepared"  # the training corpus as shards (data.pipeline: prepared)
        self.input_stream_path = self.path / "input_stream.json"  # the input route and what exact resume needs
        self.init_from_path = self.path / "init_from.json"  # the run it started from (train --init-from)
        self.divergence_path = self.path / "divergence.jsonl"  # divergences caught in training, one per line
        self.memory_path = self.path / "memory.json"  # the memory estimate and the batch split (training)
        self.shortlist_path = self.path / "shortlist.npz"  # the vocabulary shortlist (t2t-keras shortlist)
        self.distilled_dir = self.path / "distilled"  # a student's data (t2t-keras distill)
        self.distillation_path = self.distilled_dir / "distill.json"  # the teacher's settings, the shards done
        self.pretrained_path = self.path / "pretrained.json"  # an imported checkpoint's provenance (t2t-keras import)
        self.checksums_path = self.path / "checksums.json"  # the tokenizer file's sha256
        self.lock_path = self.path / ".lock"  # held by the process writing the run (run_lock.RunLock)
        self.lock_record_path = self.path / ".lock.json"  # that process: pid, host, command line, start time
        self._config = None

    def __fspath__(self):  # opens, paths and messages take a RunDirectory where they take its path
        return str(self.path)

    def __str__(self):
        return str(self.path)

    def __repr__(self):
        return f"RunDirectory({str(self.path)!r})"

    def exists(self):
        return self.config_path.exists()

    def lock(self, command):
        """The run's `run_lock.RunLock`, for `command` ("train", "average", ...): `with run.lock("train"): ...`."""
        return RunLock(self.lock_path, self.lock_record_path, command)

    def load_config(self):
        """The run's config, read from config.yaml once (and kept in step with `save_config`)."""
        if self._config is None:
            if not self.exists():
                raise ConfigError(f"{self.path} is not a run directory (no config.yaml): train into it first.")
            saved = _upgraded(yaml.safe_load(self.config_path.read_text(encoding="utf-8")))
            if isinstance((saved or {}).get("data"), dict):
                saved = {**saved, "data": config_paths.in_run(saved["data"], self.path)}
            self._config = config_lib.from_dict(saved)
        return self._config

    def save_config(self, config):
        """Writes `config`, resolved (`resolved_run.resolve_run`: its data file paths absolute), to config.yaml, its
        data files inside the run relative to it (`config_paths.for_run`), and keeps it as `load_config` gives it."""
        saved = config.to_dict()
        saved["data"] = config_paths.for_run(saved["data"], self.path)
        write_text_atomic(self.config_path, yaml.safe_dump(saved, sort_keys=False))
        self._config = config

    def write_json(self, path, data):
        """Writes `data` to `path`, one of the run's JSON files (an attribute of this object), atomically."""
        write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, path):
        """The content of `path`, one of the run's JSON files, or None when it does not exist."""
        return read_json_file(path)

    def read_json_lines(self, path):
        """The records of `path`, one of the run's JSON lines files, in order; [] when it does not exist."""
        path = pathlib.Path(path)
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.strip()]

    def append_json_line(self, path, record):
        """Adds `record` to `path`, one of the run's JSON lines files; the file is replaced atomically, so a reader
        sees every earlier record and either none or all of this one."""
        lines = [json.dumps(old, sort_keys=True) for old in self.read_json_lines(path)]
        write_text_atomic(path, "\n".join(lines + [json.dumps(record, sort_keys=True, default=str)]) + "\n")

    def checkpoint_paths(self):
        """The run's checkpoints, oldest first."""
        return checkpoint_paths(self.checkpoint_dir)

    def tokenizer_file(self, kind):
        """Where the run keeps its tokenizer of `kind` (its config's `data.tokenizer`)."""
        return self.path / tokenizer_filename(kind)

    def checked_tokenizer_file(self, kind):
        """`tokenizer_file(kind)`, checked against the sha256 recorded when it was written (`CorruptFileError`)."""
        path = self.tokenizer_file(kind)
        if path.exists():
            verify_files(self.checksums_path, f"Restore it from where it came from (the run it was copied from, or a "
                         f"backup of {self.path}): the run's weights hold ids of that vocabulary only.", [path.name])
        return path

    def record_tokenizer(self, kind):
        """Records the sha256 of the run's tokenizer file of `kind` in RUN/checksums.json, unless it is recorded."""
        path = self.checked_tokenizer_file(kind)
        if path.exists() and path.name not in (read_checksums(self.checksums_path) or {}):
            record_files(self.checksums_path, [path])

    def best_checkpoint(self):
        """`(path, info)` of the best checkpoint; `info` is best.json (step, metric, value)."""
        info = self.read_json(self.best_info_path)
        if info is None:
            raise T2TError(
                f"{self.path} has no best checkpoint ({self.best_dir} does not exist). It is written during training "
                "when dev evaluation is on: continue the run with --set training.eval_every_steps=N (dev BLEU every "
                "N updates; training.best_metric picks bleu or loss), or use the last checkpoints."
            )
        return str(self.best_dir / MODEL_CHECKPOINT), info

    def write_best(self, model, info, directory=None):
        """Replaces RUN/best/ (or `directory`) atomically with `model`'s weights and best.json holding `info`."""
        write_model_weights(directory or self.best_dir, model, "best.json", info)

    def load_tokenizer(self):
        """The run's tokenizer, of its config's `data.tokenizer`, checked against the model's vocabulary size."""
        config = self.load_config()  # fails clearly when this is not a run directory
        path = self.checked_tokenizer_file(config.data.tokenizer)
        if not path.exists():
            raise T2TError(f"{path} does not exist: train the run first (it writes the vocabulary).")
        tokenizer = load_tokenizer(path, config.data.tokenizer)
        check_vocab_size(tokenizer.vocab_size, config.model.vocab_size)
        return tokenizer

    def load_shortlist(self):
        """The run's vocabulary shortlist (`data.shortlist.Shortlist`), or a T2TError naming the command that
        learns it."""
        fix = f"learn it with t2t-keras shortlist --run-dir {self.path}"
        if not self.shortlist_path.exists():
            raise T2TError(f"{self.path} has no vocabulary shortlist ({self.shortlist_path.name}): {fix}.")
        return load_shortlist(self.shortlist_path, self.load_config().model.vocab_size, fix)


def open_run(run):
    """`run` itself when it is a `RunDirectory` (opened once, handed down), else a `RunDirectory` of the path."""
    return run if isinstance(run, RunDirectory) else RunDirectory(run)


def format_shortlist(run_dir, shortlist):
    """One line of `t2t-keras shortlist`: where the run's shortlist went, and what it holds."""
    return (f"{open_run(run_dir).shortlist_path}: {shortlist.settings['per_source']} target pieces per source piece "
            f"and the {len(shortlist.frequent)} most frequent, from {shortlist.settings['pairs']} pairs")


def learn_run_shortlist(run, per_source=None, frequent=None):
    """Learns the shortlist of a run from its training corpus (RUN/prepared/ when there, else the data config's
    training split) tokenized with its tokenizer, and writes it to RUN/shortlist.npz atomically; returns it."""
    run = open_run(run)
    with run.lock("shortlist"):
        return _learn_shortlist(run, per_source, frequent)


def _learn_shortlist(run, per_source, frequent):
    from t2t_keras.data import shortlist as shortlist_lib
    from t2t_keras.data.sources import load_pairs

    run = open_run(run)
    config = run.load_config()
    check_task("shortlist", config.task, run.path)
    tokenizer = run.load_tokenizer()
    if (run.prepared_dir / "manifest.json").exists():
        pairs = shortlist_lib.prepared_id_pairs(run.prepared_dir)
    else:
        pairs = shortlist_lib.corpus_id_pairs(load_pairs(config.data, "train")[0], tokenizer)
    shortlist = learn_shortlist(pairs, config.model.vocab_size,
                                shortlist_lib.PER_SOURCE if per_source is None else per_source,
                                shortlist_lib.FREQUENT if frequent is None else frequent)
    save_shortlist(run.shortlist_path, shortlist)
    logger.info("Learned a shortlist from %d pairs into %s", shortlist.settings["pairs"], run.shortlist_path)
    return shortlist


def write_model_weights(directory, model, info_name, info):
    """Replaces `directory` atomically with `model`'s weights (`ckpt`, with the sha256 of its files) and
    `info_name` holding `info`."""
    with staged_directory(directory, True, weights_bytes(model.weights), " (the size of the weights)") as staging:
        tf.train.Checkpoint(model=model).write(str(staging / MODEL_CHECKPOINT))
        record_checkpoint(staging / MODEL_CHECKPOINT)
        write_text_atomic(staging / info_name, json.dumps(info, indent=2, sort_keys=True) + "\n")


def weights_bytes(variables):
    """The bytes `variables` take (what a checkpoint of them needs on disk, near enough)."""
    return sum(int(np.prod(variable.shape)) * np.dtype(_numpy_dtype(variable)).itemsize for variable in variables)


def _numpy_dtype(variable):
    dtype = variable.dtype  # a name for Keras variables, a tf.DType for TensorFlow's
    return getattr(dtype, "as_numpy_dtype", dtype)


def checked_checkpoint(prefix):
    """`prefix` (a tf.train checkpoint), its files checked against the sha256 recorded when they were written:
    a `CorruptFileError` names a damaged one. A checkpoint without a record (an earlier version's) passes."""
    verify_checkpoint(prefix, "Use other weights of the run (--model latest, best or averaged, where it has them); "
                      "t2t-keras train sets a damaged checkpoint aside and resumes from the newest one that is whole.")
    return prefix


def checkpoint_paths(directory):
    """All checkpoints in `directory`, oldest first."""
    state = tf.train.get_checkpoint_state(str(directory))
    return list(state.all_model_checkpoint_paths) if state else []


def checkpoint_step(path):
    """The step a checkpoint path was written at (`.../ckpt-1200` -> 1200)."""
    return int(str(path).rsplit("-", 1)[-1])


def _new_model(config):
    """The run's model as its checkpoints hold it: with adapters when training.lora_rank is set."""
    model = build_model(config.model)
    return add_adapters(model, config.training.lora_rank) if config.training.lora_rank is not None else model


def merged_model(model, config):
    """`model` itself, or for a model with adapters the same config's model without them, adapters merged."""
    return merged_into(model, build_model(config.model)) if has_adapters(model) else model


@dataclasses.dataclass(frozen=True)
class Weights:
    """Which weights of a run a model is loaded from: what an export logs and records (weights.json)."""

    source: str  # "averaged", "latest" or "best"
    checkpoint: str  # the tf.train checkpoint path
    steps: tuple  # the training steps it holds (several for an average)

    def describe(self):
        steps = ", ".join(map(str, self.steps))
        return {"averaged": f"the average of the checkpoints at steps {steps}", "latest": f"the checkpoint at step "
                f"{steps}", "best": f"the best checkpoint (step {steps})"}[self.source]


def run_weights(run, source="auto"):
    """The `Weights` `source` names: "averaged" (RUN/averaged/), "latest" (newest checkpoint), "best" (RUN/best/)
    or "auto": the average when it includes the newest checkpoint, else the newest checkpoint."""
    if source not in MODEL_SOURCES:
        raise T2TError(f"source must be one of {MODEL_SOURCES}. Received: source={source!r}")
    run = open_run(run)
    run.load_config()  # fails clearly when this is not a run directory
    if source == "best":
        path, info = run.best_checkpoint()
        return Weights("best", path, (info["step"],))
    paths, averaged = run.checkpoint_paths(), run.read_json(run.averaged_info_path)
    fresh = (averaged is not None and paths and averaged.get("ending", "last") == "last"
             and checkpoint_step(paths[-1]) in averaged["steps"])
    if source == "averaged" or (source == "auto" and fresh):
        if averaged is None:
            raise T2TError(f"{run.path} has no averaged checkpoints: run t2t-keras average --run-dir {run.path}.")
        return Weights("averaged", str(run.averaged_dir / MODEL_CHECKPOINT), tuple(averaged["steps"]))
    if not paths:
        raise MissingPathError(f"{run.checkpoint_dir} holds no checkpoint: train the run first.")
    return Weights("latest", paths[-1], (checkpoint_step(paths[-1]),))


def load_run_model(run, source="auto"):
    """The trained model of a run, from the weights `run_weights(run, source)` names; adapters merged."""
    run = open_run(run)
    weights = run_weights(run, source)
    config = run.load_config()
    model = _new_model(config)
    tf.train.Checkpoint(model=model).restore(checked_checkpoint(weights.checkpoint)).expect_partial()
    logger.info("Loaded %s of %s%s.", weights.describe(), run.path,
                ", its adapters merged" if config.training.lora_rank is not None else "")
    return merged_model(model, config)


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
        checkpoint.restore(checked_checkpoint(path)).expect_partial()
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


def average_run(run, last=None, checkpoint="last"):
    """Averages the last `last` checkpoints of a run (default: training.average_last) into RUN/averaged/.

    `checkpoint="best"` averages the best checkpoint (RUN/best/) and the `last - 1` kept checkpoints before it.
    Returns the averaged directory (weights `ckpt` and averaged.json, replaced atomically).
    """
    run = open_run(run)
    with run.lock("average"):
        return _average_run(run, last, checkpoint)


def _average_run(run, last, checkpoint):
    config = run.load_config()
    last = last or config.training.average_last
    paths, steps = _checkpoints_to_average(run, last, checkpoint)
    if not paths:
        raise MissingPathError(f"{run.checkpoint_dir} holds no checkpoint: train the run first.")
    if len(paths) < last:
        logger.warning("Averaging %d checkpoints: only that many are kept (training.keep_checkpoints).", len(paths))
    model = average_checkpoints(_new_model(config), paths)
    write_model_weights(run.averaged_dir, model, run.averaged_info_path.name,
                        {"checkpoints": [str(p) for p in paths], "steps": steps, "ending": checkpoint})
    logger.info("Averaged checkpoints at steps %s into %s", steps, run.averaged_dir)
    return run.averaged_dir


def load_run(run, source="auto"):
    """`(model, tokenizer)` of a run directory (see `run_weights` for `source`)."""
    run = open_run(run)
    tokenizer = run.load_tokenizer()  # also fails clearly when run is not a run directory
    return load_run_model(run, source), tokenizer


def ensemble_runs(run, others):
    """`others` opened as runs whose models may decode with `run`'s (an ensemble): each a translation run, as
    `run`, holding `run`'s vocabulary (same tokenizer scheme and model.vocab_size, tokenizer files with the same
    sha256), else an error naming the runs and the fix. The same id must mean the same piece in every model."""
    run = open_run(run)
    opened = [open_run(other) for other in others]
    if not opened:
        return []
    for each in [run] + opened:
        task = each.load_config().task
        if task != "translation":
            check_applicable(["an ensemble"], f"{each.path}, an {task} run: ensembles decode translation runs")
    mine = _vocabulary(run)
    for other in opened:
        for what, ours, theirs in zip(VOCABULARY_PARTS, mine, _vocabulary(other)):
            if ours != theirs:
                path = run.tokenizer_file(run.load_config().data.tokenizer)
                raise ConfigError(
                    f"{other.path} and {run.path} do not share a vocabulary: their {what} differs ({theirs} and "
                    f"{ours}). Runs decode together only when each id means the same piece in both: train them with "
                    f"one tokenizer (copy {path} into a new run directory before its first t2t-keras train, which "
                    "then uses it, or start the run with train --init-from), or decode them one at a time.")
    return opened


VOCABULARY_PARTS = ("tokenizer (data.tokenizer)", "vocabulary size (model.vocab_size)", "tokenizer file (sha256)")


def _vocabulary(run):
    """`(tokenizer scheme, vocabulary size, sha256 of the tokenizer file)` of a run."""
    config = run.load_config()
    path = run.tokenizer_file(config.data.tokenizer)
    if not path.exists():
        raise T2TError(f"{path} does not exist: train the run first (it writes the vocabulary).")
    return config.data.tokenizer, config.model.vocab_size, hashlib.sha256(path.read_bytes()).hexdigest()


def write_inspection_files(export_dir, model, tokenizer, weights=None):
    """The Keras model and the tokenizer beside a SavedModel, for inspection (`load_export`), and weights.json
    naming the run's weights it holds (`weights`: a dict, e.g. from `export_record`)."""
    extra = pathlib.Path(export_dir) / INSPECTION_DIR
    extra.mkdir(parents=True, exist_ok=True)
    model.save(extra / "model.keras")
    tokenizer.save(extra / tokenizer_filename(tokenizer.kind))
    if weights is not None:
        write_text_atomic(extra / "weights.json", json.dumps(weights, indent=2, sort_keys=True) + "\n")


def weights_to_export(run, source="auto", average_last=None):
    """`(model, record)`: the run's model to export and `export_record` of its weights, logged.

    `average_last` averages the run's last N checkpoints first (§6.1), ending at the best one for
    `source="best"`, and exports the average.
    """
    run = open_run(run)
    if average_last is not None:
        with run.lock("export --average-last"):  # the average is written into the run
            average_run(run, average_last, checkpoint="best" if source == "best" else "last")
        source = "averaged"
    weights = run_weights(run, source)
    return load_run_model(run, weights.source), export_record(run, weights)


def export_record(run, weights):
    """What an export records of the weights it holds (`Weights`), and logs."""
    logger.info("Exporting %s of %s.", weights.describe(), open_run(run).path)
    return {"run": str(open_run(run).path), "source": weights.source, "checkpoint": weights.checkpoint,
            "steps": list(weights.steps)}


def read_json_file(path):
    """The JSON content of `path`, or None when it does not exist."""
    path = pathlib.Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def load_export(export_dir):
    """`(model, tokenizer)` that a text export keeps in `assets.extra/` (see `write_inspection_files`)."""
    extra = pathlib.Path(export_dir) / INSPECTION_DIR
    if not (extra / "model.keras").exists():
        raise T2TError(
            f"{export_dir} holds no {INSPECTION_DIR}/model.keras: it is not a text export of t2t-keras "
            "export (ids-only exports carry no model for inspection). Use its run directory (--run-dir)."
        )
    return keras.models.load_model(extra / "model.keras"), load_tokenizer(find_tokenizer(extra))
