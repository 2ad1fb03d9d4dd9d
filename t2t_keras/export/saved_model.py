"""Writing a run as a SavedModel, atomically: complete at `out_dir`, or absent.

A translation run becomes a `TranslatorModule` (strings in, translations out),
an lm run a `ContinuerModule` (prompts in, continuations out); an mlm run has
nothing to generate and is refused.

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
from t2t_keras.decoding.layout import layout_of
from t2t_keras.decoding.quality_features import FEATURES
from t2t_keras.decoding.quality_model import QUALITY_ESTIMATE_FILE, choose_model, read_quality_models
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.weight_precision import check_precision, in_precision
from t2t_keras.errors import T2TError, check_applicable
from t2t_keras.export.constrained_module import ConstrainedTranslatorModule
from t2t_keras.export.continuer_module import ContinuerModule
from t2t_keras.export.integrity import record_export
from t2t_keras.export.quantization import quantized_copy
from t2t_keras.export.translator_module import MAX_BEAM_SIZE, TranslatorModule
from t2t_keras.fast_path import FastPath
from t2t_keras.files import check_can_write, staged_directory
from t2t_keras.runs import open_run, weights_bytes, weights_to_export, write_inspection_files
from t2t_keras.switches.threads import search_record
from t2t_keras.tasks import task_of

logger = logging.getLogger(__name__)


def export_run(run_dir, out_dir, average_last=None, source="auto", request=None, max_beam_size=None, **options):
    """Exports the trained model of a run, with its tokenizer, as a SavedModel of its task.

    Args:
        run_dir: a training run directory (see `t2t_keras.runs`), or an open `RunDirectory`.
        out_dir: the export directory to create.
        average_last, source: which weights (`runs.weights_to_export`), logged and in assets.extra/weights.json.
        request: the `GenerationRequest` of `serving_default`; None takes the run's (`Task.default_request` of its
            `decoding` section). An lm export uses its `max_extra_length` (the new pieces), `temperature` and
            `top_k`.
        max_beam_size: largest beam size the export accepts; None takes `decoding.max_beam_size`.
        **options: passed to `export_translator` (`text_signatures`, `jit_compile`, `overwrite`, `quantization`,
            `precision` (by default the run's `model.weights_dtype`: a run of bfloat16 weights exports them),
            `constraints` and `shards`, by default the run's `decoding.shards`;
            `quantization="auto"` picks int8 or float32 by the fast path (`Decisions.quantization`);
            `shortlist=True` holds the run's vocabulary shortlist, RUN/shortlist.npz); an lm export takes
            `overwrite` only.

    Returns the export directory, a `pathlib.Path`.
    """
    run = open_run(run_dir)
    config = run.load_config()
    _check_exportable(config.task, run_dir, dict(max_beam_size=max_beam_size, **options))
    request = task_of(config).default_request(config.decoding) if request is None else request
    if config.task != "lm" and options.get("precision") is None:
        options["precision"] = config.model.weights_dtype
    if options.pop("shortlist", None):
        options["shortlist"] = run.load_shortlist()  # before the weights: a bad file fails before any work
    model, options["weights"] = weights_to_export(run, source, average_last)
    if options.get("quantization") == "auto":
        options["quantization"] = _auto_quantization(model, options)
    tokenizer = run.load_tokenizer()
    if config.task == "lm":
        return export_continuer(model, tokenizer, out_dir, request.max_extra_length, request.temperature,
                                request.top_k, **options)
    options = {"shards": config.decoding.shards, "quality": run_quality_models(run), **options}
    return export_translator(model, tokenizer, out_dir, config.decoding.max_beam_size if max_beam_size is None
                             else max_beam_size, request, **options)


def run_quality_models(run):
    """The quality estimate a run's translation exports carry (`t2t-keras qe-train`), its `QualityModel`s; None
    where the run has none."""
    path = run.path / QUALITY_ESTIMATE_FILE
    if not path.exists():
        return None
    models = read_quality_models(path)[0]
    choose_model(models, FEATURES, str(path))  # the one the signatures compute: refused here, before any work
    return models


def _check_exportable(task, run_dir, options):
    """Refuses an mlm run (nothing to generate), and for an lm run the options only a translation export takes."""
    if task == "mlm":
        raise T2TError(f"{run_dir} trains task 'mlm': a masked language model has nothing to generate, so there "
                       "is nothing to export. Export a translation or lm run; score the mlm with t2t-keras evaluate.")
    if task == "lm":
        check_applicable(sorted(name for name, value in options.items() if value is not None and name != "overwrite"),
                         "the export of an lm run")


def _auto_quantization(model, options):
    """`quantization="auto"`: what the fast path picks (float32 beside `precision="bfloat16"`), logged
    and recorded in assets.extra/weights.json."""
    if check_precision(options.get("precision") or "float32") == "bfloat16":
        chosen, reason = None, "float32 weights beside precision bfloat16"
    else:
        chosen, reason = FastPath.detect().quantization(model.count_params())
    logger.info("--quantization auto: %s", reason)
    options["weights"] = dict(options["weights"], quantization=chosen or "float32", quantization_reason=reason)
    return chosen


def export_translator(model, tokenizer, out_dir, max_beam_size=MAX_BEAM_SIZE, request=DEFAULTS, text_signatures=True,
                      jit_compile=False, overwrite=False, quantization=None, shards=1, weights=None, shortlist=None,
                      constraints=False, precision="float32", quality=None):
    """Writes `model` and `tokenizer` as a translation SavedModel at `out_dir`.

    Args:
        model: a built `Transformer`.
        tokenizer: its `Tokenizer` (the vocabulary sizes must agree).
        out_dir: the export directory to create.
        max_beam_size: largest beam size the export accepts.
        request: the `GenerationRequest` of `serving_default`, whose length penalty and stopping rule every
            search keeps.
        text_signatures: False writes an ids-only export (`serving_default` and `translate_ids` on token
            ids, no tokenizer), which loads without TF-Text, e.g. in stock TensorFlow Serving.
        jit_compile: True: every search with XLA; "auto": float32 small batches' (`TranslatorModule`).
        overwrite: replace an existing export.
        quantization: None, or "int8" for int8 Dense weights (see `export.quantization`; the inspection
            files keep float32).
        shards: concurrent searches per batch; see `TranslatorModule`.
        weights: what to record in assets.extra/weights.json (`runs.export_record`; with the arithmetic), or None.
        shortlist: None, or a vocabulary shortlist (`data.shortlist.Shortlist`) the searches apply
            in-graph (see `TranslatorModule`).
        constraints: add the `translate_constrained` signature (target terms, `export.constrained_module`).
        precision: "float32", or "bfloat16" for weights and arithmetic in bfloat16 (`decoding.weight_precision`: a
            copy of a float32 model; a model of bfloat16 weights itself, which "float32" widens); not with
            `quantization`. The inspection files keep the model's own weights.
        quality: None, or the run's `QualityModel`s: the `quality` output of `translate` and `serving_default`.

    Returns the export directory (a `pathlib.Path`); FileExistsError if `out_dir` exists unless `overwrite`.
    """
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    searched = _searched_model(model, quantization, precision)
    kind = ConstrainedTranslatorModule if constraints else TranslatorModule
    module = kind(searched, tokenizer if text_signatures else None, request=request, max_beam_size=max_beam_size,
                  jit_compile=_search_compilation(jit_compile, quantization, precision), shards=shards,
                  shortlist=shortlist, layout=layout_of(tokenizer, model.special_ids), quality=quality)
    inspection = (model, tokenizer, _record(weights, quantization, precision, module)) if text_signatures else None
    return _write(module, out_dir, overwrite, inspection, "a translation")


def _search_facts(module):
    """What `switches.threads` reads before TensorFlow loads: the searches' shards, whether all run in graph mode,
    the model width."""
    graph_mode_only = not bool(module.jit_compiled.numpy()) and int(module.xla_below_hypotheses.numpy()) == 0
    return search_record(int(module.decoding_shards.numpy()), graph_mode_only, module.model.hidden_dim)


def _search_compilation(jit_compile, quantization, precision):
    """`jit_compile="auto"` (small-batch XLA searches, `TranslatorModule`) for float32 weights; bfloat16 and int8
    searches stay in graph mode, where their kernels are (`decoding.weight_precision`, `export.quantization`)."""
    if jit_compile == "auto" and (quantization is not None or check_precision(precision) == "bfloat16"):
        return False
    return jit_compile


def _record(weights, quantization, precision, module):
    """`weights` with what the search computes in and how the searches of `module` run, which `switches.kernels`
    and `switches.threads` read before TensorFlow loads."""
    if weights is None:
        return None
    return dict(weights, precision=check_precision(precision), quantization=quantization or "float32",
                search=_search_facts(module))


def _searched_model(model, quantization, precision):
    """The model the signatures search: `model` in `precision` (`in_precision`: itself, or its copy), or its int8
    copy (of its float32 weights)."""
    if check_precision(precision) == "bfloat16" and quantization is not None:
        raise T2TError(f"precision=bfloat16 and quantization={quantization} exclude each other: an export holds "
                       "one kind of weights. Export with one of them (a run of bfloat16 weights exports them unless "
                       "--precision float32).")
    searched = in_precision(model, precision)
    return searched if quantization is None else quantized_copy(searched, quantization)


def export_continuer(model, tokenizer, out_dir, max_extra_length=DEFAULTS.max_extra_length, temperature=0.0, top_k=0,
                     overwrite=False, weights=None):
    """Writes a `CausalLanguageModel` and its tokenizer as a continuation SavedModel (`continuer_module`).

    `max_extra_length` (new pieces), `temperature` and `top_k` are the defaults of `serving_default`.
    """
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    module = ContinuerModule(model, tokenizer, max_extra_length, temperature, top_k)
    return _write(module, out_dir, overwrite, (model, tokenizer, weights), "a continuation")


def _write(module, out_dir, overwrite, inspection, kind):
    """Saves `module` with its signatures at `out_dir` atomically, with `(model, tokenizer, weights)` beside it."""
    # The disk it needs: the searched weights, and the Keras model's again among the inspection files.
    needed = weights_bytes(module.model.weights) + (weights_bytes(inspection[0].weights) if inspection else 0)
    with staged_directory(out_dir, overwrite, needed, " for the weights (the graph comes on top)") as staging:
        tf.saved_model.save(module, str(staging), signatures=module.signatures())
        if inspection is not None:
            write_inspection_files(staging, *inspection)
        record_export(staging)
    logger.info("Exported %s SavedModel to %s", kind, out_dir)
    return out_dir
