"""Which of TensorFlow's CPU kernels run a search, of an export or of a run: oneDNN's, or TensorFlow's own.

TensorFlow on x86 sends matmuls and many other ops to oneDNN by default. Without it a float32 export's search
ran 1.3-2.1x faster at batch 1, as fast at batch 32, in 130-220 MB less (bench/results/history.md, "One beam search for
every beam size"). A bfloat16 export needs oneDNN (its bfloat16 kernels are where its speed comes from) and an
int8 export keeps it.

TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` once, when it is imported, so the choice is made from what the export
recorded (`assets.extra/weights.json`: `precision`, `quantization`) before anything imports TensorFlow:
`choose_onednn(export_dir)`, which `switches` calls for an export. A value the user set wins, an export that
recorded neither (ids-only, or older) keeps TensorFlow's default, and a process that imported TensorFlow already
keeps what it has.

    choose_onednn("exports/base")   # "0" for a float32 export: TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow loads

A translation run's search in a process that only decodes (`translate` and `evaluate` with `--run-dir`) makes the
same choice from the runs' config.yaml (`decoding.precision`, or `--precision`): `choose_onednn_for_runs(run_dirs,
precision)`. Without oneDNN, `translate --run-dir` of the two-layer-decoder student took 0.95x the time on the
1,522-sentence test set with beam 4 (the whole process) at a peak of 1.35 GB instead of 1.64 GB, and the `small`
teacher 0.98x at 1.62 GB instead of 2.03 GB, with the same translations (bench/results/history.md, "Decoding a run
without oneDNN"). Commands that train (`train`, `main`, `distill`) keep oneDNN. The choice is a CPU's
(`Decisions.onednn`, switches/decisions.py): on a GPU or a TPU the search runs there and nothing is set.
"""

import json
import os
import pathlib
import sys

import yaml

from t2t_keras.config import TASK_OF_ARCHITECTURE, DecodingConfig, ModelConfig
from t2t_keras.config_paths import RUN_CONFIG_FILE
from t2t_keras.switches.decisions import Decisions

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
ALLOCATOR = "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"  # oneDNN's tensors from glibc's allocator, not oneDNN's own pool
RECORD = pathlib.Path("assets.extra") / "weights.json"


def export_record(export_dir):
    """The export's `assets.extra/weights.json` as a dict, or None where it has none (or not a readable one)."""
    try:
        record = json.loads((pathlib.Path(export_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def export_arithmetic(export_dir):
    """"float32", "bfloat16" or "int8": what the export's search computes in, from its record; None if unrecorded."""
    record = export_record(export_dir)
    if record is None or "precision" not in record:
        return None
    if record.get("quantization") not in (None, "float32"):
        return record["quantization"]
    return record["precision"]


def choose_onednn(export_dir, environ=None, modules=None, decisions=None):
    """Sets `TF_ENABLE_ONEDNN_OPTS` in `environ` (os.environ) as `decisions` (None: this hardware's,
    `Decisions.before_tensorflow()`) rule for the export's arithmetic: "0" for a float32 export on a CPU, unless the
    variable is set or TensorFlow is in `modules` (sys.modules) already. Returns the value set, or None."""
    return _set(export_arithmetic(export_dir), environ, modules, decisions)


def kernels_differ(export_dir, environ=None, decisions=None):
    """Why the export at `export_dir` would have had other kernels than this process's (it started with
    `TF_ENABLE_ONEDNN_OPTS` chosen for another export: a model base path's first version), or None where they
    agree or the export recorded no arithmetic."""
    environ = os.environ if environ is None else environ
    arithmetic = export_arithmetic(export_dir)
    if arithmetic is None:
        return None
    decisions = Decisions.before_tensorflow() if decisions is None else decisions
    wanted, running = decisions.onednn(arithmetic) or "1", environ.get(VARIABLE, "1")
    if wanted == running:
        return None
    kernels = "TensorFlow's own kernels" if running == "0" else "oneDNN's kernels"
    return (f"{export_dir} computes in {arithmetic} and runs on {kernels}, chosen when this process started "
            f"(TF_ENABLE_ONEDNN_OPTS={running}); it would run faster on the others: restart the server to choose "
            "for it.")


def run_arithmetic(run_dir, precision=None):
    """"float32" or "bfloat16": what a translation run's search computes in (`precision`, else the run's
    `decoding.precision`); None for a run of another task, or whose config.yaml cannot be read."""
    try:
        saved = yaml.safe_load((pathlib.Path(run_dir) / RUN_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(saved, dict):
        return None
    model, training = saved.get("model") or {}, saved.get("training") or {}
    task = training.get("task") or TASK_OF_ARCHITECTURE.get(model.get("architecture", ModelConfig.architecture))
    if task != "translation":
        return None
    return precision or (saved.get("decoding") or {}).get("precision", DecodingConfig.precision)


def choose_onednn_for_runs(run_dirs, precision=None, environ=None, modules=None, decisions=None):
    """Sets `TF_ENABLE_ONEDNN_OPTS` in `environ` (os.environ) as `decisions` (None: this hardware's) rule where
    every run of `run_dirs` is a translation run that searches in float32 ("0" on a CPU), unless the variable is
    set or TensorFlow is in `modules` (sys.modules) already. Returns the value set, or None."""
    float32 = bool(run_dirs) and all(run_arithmetic(run_dir, precision) == "float32" for run_dir in run_dirs)
    return _set("float32" if float32 else None, environ, modules, decisions)


def choose_allocator(versions_swap, environ=None, modules=None, decisions=None):
    """Sets `TF_ONEDNN_USE_SYSTEM_ALLOCATOR` in `environ` (os.environ) as `decisions` (None: this hardware's) rule
    for a process whose models come and go (`versions_swap`): "1" on a CPU, so that the memory of a version let go
    returns to the system (oneDNN's own pool keeps it); unless the variable is set or TensorFlow is in `modules`
    (sys.modules) already. Returns the value set, or None."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if ALLOCATOR in environ or "tensorflow" in modules:
        return None
    value = (Decisions.before_tensorflow() if decisions is None else decisions).onednn_allocator(versions_swap)
    if value is not None:
        environ[ALLOCATOR] = value
    return value


def _set(arithmetic, environ, modules, decisions):
    """`TF_ENABLE_ONEDNN_OPTS` in `environ` as `decisions.onednn(arithmetic)` rules, unless set already or
    TensorFlow (in `modules`) read it already; the value set, or None."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if arithmetic is None or VARIABLE in environ or "tensorflow" in modules:
        return None
    value = (Decisions.before_tensorflow() if decisions is None else decisions).onednn(arithmetic)
    if value is not None:
        environ[VARIABLE] = value
    return value
