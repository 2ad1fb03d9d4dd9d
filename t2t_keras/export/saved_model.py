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

import logging
import pathlib

import tensorflow as tf

from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.export.quantization import quantized_copy
from t2t_keras.export.translator_module import MAX_BEAM_SIZE, TranslatorModule
from t2t_keras.files import check_can_write, staged_directory
from t2t_keras.runs import RunDirectory, average_run, load_run, write_inspection_files

logger = logging.getLogger(__name__)


def export_run(run_dir, out_dir, average_last=None, source="auto", beam_size=None, alpha=None,
               max_extra_length=None, max_beam_size=None, **options):
    """Exports the trained model of a run, with its tokenizer, as a translation SavedModel.

    Args:
        run_dir: a training run directory (see `t2t_keras.runs`).
        out_dir: the export directory to create.
        average_last: average the run's last N checkpoints first (§6.1) and
            export the average; None exports the model `runs.load_run_model(run_dir,
            source)` gives.
        source: "auto", "averaged", "latest" or "best"; see `runs.load_run_model`. With
            `average_last`, "best" averages the N checkpoints ending at the best one.
        beam_size, alpha, max_extra_length: defaults of `serving_default`; None
            takes the run config's `decoding` section.
        max_beam_size: largest beam size the export accepts; None takes
            `decoding.max_beam_size`.
        **options: passed to `export_translator` (`length_penalty`, `text_signatures`, `jit_compile`, `overwrite`,
            `quantization`).

    Returns:
        the export directory, a `pathlib.Path`.
    """
    run = RunDirectory(run_dir)
    decoding = run.load_config().decoding
    if average_last is not None:
        average_run(run_dir, average_last, checkpoint="best" if source == "best" else "last")
        source = "averaged"
    model, tokenizer = load_run(run_dir, source)
    return export_translator(
        model, tokenizer, out_dir,
        beam_size=decoding.beam_size if beam_size is None else beam_size,
        alpha=decoding.alpha if alpha is None else alpha,
        max_extra_length=decoding.extra_length if max_extra_length is None else max_extra_length,
        max_beam_size=decoding.max_beam_size if max_beam_size is None else max_beam_size,
        **options,
    )


def export_translator(model, tokenizer, out_dir, max_beam_size=MAX_BEAM_SIZE, beam_size=4, alpha=0.6,
                      max_extra_length=50, length_penalty="gnmt", text_signatures=True, jit_compile=False,
                      overwrite=False, quantization=None, shards=1):
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
        shards: concurrent searches per batch (see `TranslatorModule`).

    Returns:
        the export directory, a `pathlib.Path`.

    Raises:
        FileExistsError: `out_dir` exists and `overwrite` is False.
    """
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    searched = model if quantization is None else quantized_copy(model, quantization)
    module = TranslatorModule(searched, tokenizer if text_signatures else None, max_beam_size=max_beam_size,
                              beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
                              length_penalty=length_penalty, jit_compile=jit_compile, shards=shards)
    with staged_directory(out_dir, overwrite) as staging:
        tf.saved_model.save(module, str(staging), signatures=module.signatures())
        if text_signatures:
            write_inspection_files(staging, model, tokenizer)
    logger.info("Exported a translation SavedModel to %s", out_dir)
    return out_dir
