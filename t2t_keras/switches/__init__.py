"""Every process-wide choice in one place: XLA's flags, oneDNN's kernels and allocator, TensorFlow's intra-op threads.

TensorFlow reads these environment variables once, when its runtime starts, and keeps them for the life of the
process. A command makes its choices before anything imports TensorFlow, inside `command_switches`, which logs
them once and restores the variables when the command ends, also on an error. Importing `t2t_keras` changes no
environment variable.

    xla       TF_XLA_FLAGS            commands that train: the flags auto-clustering needs on a CPU
    kernels   TF_ENABLE_ONEDNN_OPTS   a float32 search on a CPU (an export's record, or a run's config): off
              TF_ONEDNN_USE_SYSTEM_ALLOCATOR  a server whose versions come and go, on a CPU: glibc's allocator
    threads   TF_NUM_INTRAOP_THREADS  a narrow export searching in shards on a CPU: one thread per shard's share

The export is the one the command opens; for `serve --model-base-path`, the newest version there when it starts
(`newest_version`): a later version of another arithmetic runs on the kernels chosen for the first, and the server
logs so when it loads it (`kernels.kernels_differ`).

All four are CPU settings: on a GPU or a TPU none is set. What the hardware decides comes from one table,
`decisions.Decisions`, evaluated once per command for the hardware as the system lists it before TensorFlow
starts (`Decisions.before_tensorflow()`); each chooser applies it to what the command opens, and leaves a value
the user set, or a TensorFlow that started already, as it is. Auto-clustering itself, which TensorFlow takes per
traced function, is `clustering.xla_auto_clustering`, scoped to the training it is for.
"""

import contextlib
import logging
import os
import pathlib

from t2t_keras.config_paths import is_run_directory
from t2t_keras.switches import kernels, threads, xla
from t2t_keras.switches.decisions import Decisions

logger = logging.getLogger(__name__)

TRAINING_COMMANDS = ("train", "main", "distill")  # their graph-mode steps may cluster fusible ops
DECODING_COMMANDS = ("translate", "evaluate")  # their float32 searches of a run run without oneDNN
VARIABLES = (xla.VARIABLE, kernels.VARIABLE, kernels.ALLOCATOR, threads.VARIABLE)


def choose(command, options, environ=None, modules=None, decisions=None):
    """Sets in `environ` (os.environ) what `command` with `options` (its arguments by name: `path`, `run_dirs`,
    `precision`, `litert`, `model_base_path`) needs before TensorFlow loads, as `decisions` (None:
    `Decisions.before_tensorflow()`) rule; returns `{variable: value}` of what it set."""
    environ = os.environ if environ is None else environ
    decisions = Decisions.before_tensorflow() if decisions is None else decisions
    before = {name: environ.get(name) for name in VARIABLES}
    if command in TRAINING_COMMANDS:
        xla.prepare_xla_flags(environ, decisions.xla_flags)
    if options.get("model_base_path") is not None:
        kernels.choose_allocator(True, environ, modules, decisions)
    path = options.get("path") or newest_version(options.get("model_base_path"))
    if path is not None and not is_run_directory(path):  # an export
        kernels.choose_onednn(path, environ, modules, decisions)
        threads.choose_intra_op_threads(path, environ, modules, decisions=decisions)
    elif command in DECODING_COMMANDS and not options.get("litert"):
        runs = options.get("run_dirs") or ([path] if path is not None else [])
        kernels.choose_onednn_for_runs(runs, options.get("precision"), environ, modules, decisions)
    return {name: environ[name] for name in VARIABLES if environ.get(name) != before[name]}


def version_directories(base_path):
    """`{number: path}` of the subdirectories of `base_path` named by a number (TF Serving's version layout)."""
    try:
        entries = list(os.scandir(base_path))
    except FileNotFoundError:
        return {}
    return {int(entry.name): pathlib.Path(entry.path) for entry in entries
            if entry.name.isdigit() and entry.is_dir()}


def newest_version(base_path):
    """The newest numbered version directory under a model base path (`serve --model-base-path`: the export it
    opens first, whose record the switches follow), or None without one."""
    if base_path is None:
        return None
    try:
        versions = version_directories(base_path)
    except OSError:
        return None
    return str(versions[max(versions)]) if versions else None


@contextlib.contextmanager
def command_switches(command, options, environ=None, modules=None):
    """`choose` for the block's command, logged once; the variables it set are restored when the block ends."""
    environ = os.environ if environ is None else environ
    before = {name: environ.get(name) for name in VARIABLES}
    chosen = choose(command, options, environ, modules)
    for name, value in chosen.items():
        logger.info("%s=%s for this %s (%s; set it yourself to choose).", name, value, command, REASONS[name])
    try:
        yield chosen
    finally:
        for name, value in before.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value


REASONS = {
    xla.VARIABLE: "a CPU's graph-mode training step may cluster its fusible ops",
    kernels.VARIABLE: "a float32 search runs on TensorFlow's own CPU kernels, not oneDNN's",
    kernels.ALLOCATOR: "versions come and go: a version let go returns its memory, which oneDNN's pool would keep",
    threads.VARIABLE: "a narrow export searching in shards: each op on one shard's share of the cores",
}
