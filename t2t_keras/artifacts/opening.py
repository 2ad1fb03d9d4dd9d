"""`open_artifact`: the kind of what is at a path, opened once with the options that kind takes.

Each kind's module is imported when a path of that kind is opened: a CTranslate2 directory opens without
TensorFlow or Keras in the process (`artifacts.ctranslate2`), a run or a SavedModel with them.
"""

import pathlib

from t2t_keras.artifacts.base import check_options
from t2t_keras.config_paths import is_run_directory
from t2t_keras.errors import T2TError

CTRANSLATE2_MODEL = "model.bin"  # what a CTranslate2 model directory holds
LITERT_SUFFIX = ".tflite"  # a LiteRT export is one file


def open_artifact(path, model=None, ensemble=(), precision=None, shards=None, shortlist=None, batch_size=32,
                  threads=None, **options):
    """The artifact at `path`: a `RunArtifact` for a run directory (its weights by `model`: see
    `runs.run_weights`; `ensemble`: more runs decoding with it), else the export there (`batch_size` lines a
    call). `options` go to the kind (a run's generator options, e.g. `progress`). `threads`: the cores it decodes
    on (None: every core the process may use), for processes that share a machine (a pipeline's local workers);
    TensorFlow's kinds take it only before TensorFlow's runtime has started in the process.

    Raises:
        T2TError: `path` is none of them, or an option does not apply to its kind.
    """
    if is_run_directory(path):
        from t2t_keras.artifacts.run import RunArtifact
        from t2t_keras.runs import open_run

        _limit_tensorflow_threads(threads)

        return RunArtifact(open_run(path), model or "auto", ensemble, precision, shards, shortlist, **options)
    check_options(f"{path}, an export: its search and weights were chosen when it was written", (),
                  model=model, ensemble=list(ensemble) or None, precision=precision, shards=shards,
                  shortlist=shortlist or None)
    return _open_export(pathlib.Path(path), batch_size, threads)


def is_ctranslate2_export(path):
    """Whether `path` is a CTranslate2 model directory (it holds CTranslate2's model.bin)."""
    return (pathlib.Path(path) / CTRANSLATE2_MODEL).exists()


def _open_export(path, batch_size, threads):
    if path.is_file() or path.suffix == LITERT_SUFFIX:
        from t2t_keras.artifacts.litert import LiteRTArtifact

        return LiteRTArtifact(path, threads)
    if is_ctranslate2_export(path):
        from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact

        return CTranslate2Artifact(path, batch_size=batch_size, threads=threads)
    if not (path / "saved_model.pb").exists():
        raise T2TError(f"{path} is neither a run directory (no config.yaml), a SavedModel (no saved_model.pb), a "
                       f"CTranslate2 model (no {CTRANSLATE2_MODEL}) nor a LiteRT file: give what `t2t-keras train "
                       "--run-dir` or `t2t-keras export --out` wrote.")
    from t2t_keras.artifacts.saved_model import SavedModelArtifact

    _limit_tensorflow_threads(threads)
    return SavedModelArtifact(path, batch_size=batch_size)


def _limit_tensorflow_threads(threads):
    if threads is not None:
        from t2t_keras.switches.threads import limit_tensorflow_threads

        limit_tensorflow_threads(threads)
