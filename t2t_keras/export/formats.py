"""`t2t-keras export`: a run written in one of four formats, each taking the options it declares.

    export_format("runs/base", "exports/base")                                   # a SavedModel
    export_format("runs/base", "exports/base-ct2", "ctranslate2", quantization="int8")
    export_format("runs/base", "exports/base.tflite", "litert", beam_size=2)
    export_format("runs/base", "exports/base-marian", "marian")                  # Hugging Face's MarianMTModel

The export's default request is the run's (its task's `default_request` of its `decoding` section) with the
given `beam_size`, `alpha`, `max_extra_length` (and, for an lm's SavedModel, `temperature` and `top_k`); the
length penalty, the stopping rule, `max_output_length` and `end_at_limit` are fixed in a SavedModel or LiteRT file
(a CTranslate2 export takes `max_output_length`). An option a format does not take for the run's task is refused,
with the options it takes, in one message.
"""

from t2t_keras.errors import T2TError, check_applicable, check_task
from t2t_keras.runs import open_run
from t2t_keras.tasks import task_of

FORMATS = ("saved_model", "ctranslate2", "litert", "marian")
# the export's default request
REQUEST = ("beam_size", "alpha", "length_penalty", "stopping", "max_extra_length", "max_output_length", "end_at_limit",
           "temperature", "top_k")
FIXED = ("length_penalty", "stopping", "max_output_length", "end_at_limit")  # fixed in an in-graph search
WEIGHTS = ("average_last", "model", "overwrite")  # which of the run's weights, and where
# What each format takes, by the run's task (a format absent for a task does not export it).
TAKES = {
    ("saved_model", "translation"): ("beam_size", "alpha", "max_extra_length", "max_beam_size", "quantization",
                                     "precision", "jit_compile", "ids_only", "shortlist", "constraints") + FIXED,
    ("saved_model", "lm"): ("max_extra_length", "temperature", "top_k"),
    ("ctranslate2", "translation"): ("beam_size", "alpha", "max_extra_length", "max_output_length", "quantization",
                                     "shortlist"),
    ("litert", "translation"): ("beam_size", "alpha", "max_extra_length", "max_beam_size", "quantization") + FIXED,
    ("marian", "translation"): ("beam_size",),  # generation_config.json's num_beams
}
EXPORT_OPTIONS = tuple(sorted({name for names in TAKES.values() for name in names} | set(WEIGHTS)))
QUANTIZATIONS = {"saved_model": ("auto", "float32", "int8"), "ctranslate2": ("float32", "int8_float32", "int8"),
                 "litert": ("float32", "int8")}


def export_format(run_dir, out, format="saved_model", **options):
    """Writes the run at `run_dir` to `out` in `format` (`FORMATS`); returns where it went.

    `options`: those `TAKES` lists for the format and the run's task, and `WEIGHTS`' (`average_last`, `model`:
    `runs.run_weights`' source, `overwrite`).
    """
    run = open_run(run_dir)
    config = run.load_config()
    takes = TAKES.get((format, config.task))
    if takes is None:
        check_task("export", config.task, f"{run.path} (--format {format})",
                   tuple(task for kind, task in TAKES if kind == format))
    check_applicable([f"--{name.replace('_', '-')}" for name in options if name not in takes + WEIGHTS],
                     f"--format {format} of a {config.task} run, which takes "
                     + ", ".join(f"--{name.replace('_', '-')}" for name in takes + WEIGHTS))
    _check_quantization(format, options.get("quantization"))
    request = task_of(config).default_request(config.decoding).updated(
        **{name: options.pop(name) for name in REQUEST if name in options})
    weights = dict(average_last=options.pop("average_last", None), source=options.pop("model", None) or "auto")
    return WRITERS[format](run, out, request, weights, options)


def _check_quantization(format, quantization):
    if quantization is not None and quantization not in QUANTIZATIONS[format]:
        raise T2TError(f"--quantization {quantization} does not apply to --format {format}, which takes "
                       f"{', '.join(QUANTIZATIONS[format])}.")


def _saved_model(run, out, request, weights, options):
    from t2t_keras.export.saved_model import export_run

    if options.pop("ids_only", False):
        options["text_signatures"] = False
    if run.load_config().task == "translation":
        quantization = options.pop("quantization", "auto")
        options["quantization"] = None if quantization == "float32" else quantization
    if "jit_compile" in options:
        options["jit_compile"] = {"auto": "auto", "true": True, "false": False}[options["jit_compile"]]
    return export_run(run, out, request=request, **weights, **options)


def _ctranslate2(run, out, request, weights, options):
    from t2t_keras.export.ctranslate2_export import export_ctranslate2_run

    return export_ctranslate2_run(run, out, quantization=options.get("quantization", "float32"), request=request,
                                  shortlist=options.get("shortlist"), overwrite=bool(options.get("overwrite")),
                                  **weights)


def _litert(run, out, request, weights, options):
    from t2t_keras.export.litert_export import export_litert_run

    return export_litert_run(run, out, quantization=options.get("quantization", "float32"), request=request,
                             max_beam_size=options.get("max_beam_size"), overwrite=bool(options.get("overwrite")),
                             **weights)


def _marian(run, out, request, weights, options):
    from t2t_keras.pretrained.marian_export import export_marian_run

    return export_marian_run(run, out, request, overwrite=bool(options.get("overwrite")), **weights)


WRITERS = {"saved_model": _saved_model, "ctranslate2": _ctranslate2, "litert": _litert, "marian": _marian}
