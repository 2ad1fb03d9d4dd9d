"""Writing a translation SavedModel, atomically: complete at `out_dir`, or absent.

The SavedModel is built in a temporary directory next to `out_dir` (same file
system) and renamed into place; on any failure the temporary directory is
removed, so `out_dir` never holds half an export. Replacing an existing export
(`overwrite=True`) moves the old one aside first and deletes it only after the
new one is in place.

    export_run("runs/base", "exports/base")          # decoding defaults from the run's config
    loaded = tf.saved_model.load("exports/base")      # after `import tensorflow_text`
    loaded.signatures["serving_default"](inputs=tf.constant(["A sentence."]))
"""

import functools
import logging
import os
import pathlib
import shutil
import tempfile

import tensorflow as tf

from t2t_keras.data.tokenizer import Tokenizer, check_vocab_size
from t2t_keras.export.quantization import quantized_copy
from t2t_keras.export.translator_module import MAX_BEAM_SIZE, TranslatorModule
from t2t_keras.training.averaging import average_run, load_run_model
from t2t_keras.training.run_directory import RunDirectory

logger = logging.getLogger(__name__)


def export_run(run_dir, out_dir, average_last=None, source="auto", beam_size=None, alpha=None,
               max_extra_length=None, **options):
    """Exports the trained model of a run, with its tokenizer, as a translation SavedModel.

    Args:
        run_dir: a training run directory (see `training.run_directory`).
        out_dir: the export directory to create.
        average_last: average the run's last N checkpoints first (§6.1) and
            export the average; None exports the model `load_run_model(run_dir,
            source)` gives.
        source: "auto", "averaged" or "latest"; see `load_run_model`.
        beam_size, alpha, max_extra_length: defaults of `serving_default`; None
            takes the run config's `decoding` section.
        **options: passed to `export_translator` (`max_beam_size`,
            `length_penalty`, `text_signatures`, `jit_compile`, `overwrite`,
            `quantization`).

    Returns:
        the export directory, a `pathlib.Path`.
    """
    run = RunDirectory(run_dir)
    decoding = run.load_config().decoding
    if average_last is not None:
        average_run(run_dir, average_last)
        source = "averaged"
    model = load_run_model(run_dir, source)
    tokenizer = Tokenizer.load(run.tokenizer_path)
    return export_translator(
        model, tokenizer, out_dir,
        beam_size=decoding.beam_size if beam_size is None else beam_size,
        alpha=decoding.alpha if alpha is None else alpha,
        max_extra_length=decoding.extra_length if max_extra_length is None else max_extra_length,
        **options,
    )


def export_translator(model, tokenizer, out_dir, max_beam_size=MAX_BEAM_SIZE, beam_size=4, alpha=0.6,
                      max_extra_length=50, length_penalty="gnmt", text_signatures=True, jit_compile=False,
                      overwrite=False, quantization=None):
    """Writes `model` and `tokenizer` as a translation SavedModel at `out_dir`.

    Args:
        model: a built `Transformer`.
        tokenizer: its `Tokenizer` (the vocabulary sizes must agree).
        out_dir: the export directory to create.
        max_beam_size: largest beam size the export accepts.
        beam_size, alpha, max_extra_length: defaults of `serving_default`.
        length_penalty: `"gnmt"`, `"average"` or `"none"`.
        text_signatures: False writes an ids-only export (`serving_default` and
            `translate_ids` on token ids, no tokenizer), which loads without
            TF-Text, e.g. in stock TensorFlow Serving.
        jit_compile: compile the searches with XLA (see `TranslatorModule`).
        overwrite: replace an existing export at `out_dir`.
        quantization: None, or "int8" for int8 Dense weights (see
            `export.quantization`; the inspection files keep float32).

    Returns:
        the export directory, a `pathlib.Path`.

    Raises:
        FileExistsError: `out_dir` exists and `overwrite` is False.
    """
    out_dir = pathlib.Path(out_dir)
    _check_target(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    searched = model if quantization is None else quantized_copy(model, quantization)
    module = TranslatorModule(searched, tokenizer if text_signatures else None, max_beam_size=max_beam_size,
                              beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
                              length_penalty=length_penalty, jit_compile=jit_compile)
    extras = None
    if text_signatures:
        extras = functools.partial(write_inspection_files, model=model, tokenizer=tokenizer)
    write_atomically(module, out_dir, overwrite, extras)
    logger.info("Exported a translation SavedModel to %s", out_dir)
    return out_dir


INSPECTION_DIR = "assets.extra"  # TF Serving's place for files beside a SavedModel; it ignores them


def write_inspection_files(export_dir, model, tokenizer):
    """The Keras model and the tokenizer beside the SavedModel, for `t2t-keras inspect --saved-model`.

    The signatures return translations only; attention weights need the
    model's layers, which `inspect` loads from these files.
    """
    extra = pathlib.Path(export_dir) / INSPECTION_DIR
    extra.mkdir(parents=True, exist_ok=True)
    model.save(extra / "model.keras")
    tokenizer.save(extra / "tokenizer.model")


def write_atomically(module, out_dir, overwrite=False, extras=None):
    """Saves `module` with its `signatures()` to a temporary directory, then renames it to `out_dir`.

    `extras(staging_dir)`, when given, writes more files before the rename.
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.incomplete-")
    os.chmod(staging, 0o755)  # mkdtemp makes it private; an export is meant to be read by servers
    try:
        tf.saved_model.save(module, staging, signatures=module.signatures())
        if extras is not None:
            extras(staging)
        _move_into_place(pathlib.Path(staging), out_dir, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _move_into_place(staging, out_dir, overwrite):
    """Renames `staging` to `out_dir`; an existing export is moved aside and removed afterwards."""
    _check_target(out_dir, overwrite)
    old = None
    if out_dir.exists():
        old = pathlib.Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.replaced-"))
        os.replace(out_dir, old / out_dir.name)
    try:
        os.replace(staging, out_dir)
    except BaseException:
        if old is not None:
            os.replace(old / out_dir.name, out_dir)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _check_target(out_dir, overwrite):
    if out_dir.exists() and not overwrite:
        raise FileExistsError(
            f"{out_dir} already exists: choose another export directory, or pass overwrite=True to replace it."
        )
