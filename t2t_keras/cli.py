"""The `t2t-keras` command line: parse arguments, load the config, call the library."""

import argparse
import json
import logging
import os
import sys

from t2t_keras.backends import requested_backend, require_tensorflow_backend
from t2t_keras.config import ALIGNMENT_ROWS, DECODING_PRECISIONS, MODEL_SOURCES, check_shards
from t2t_keras.errors import T2TError, check_applicable

TASKS = ("translation", "lm", "mlm")
STUDENT_PRESET = "student-mini"  # the student of `distill` into a new run without --config
# The tasks whose runs (or exports) each command takes; any other gets the one refusal of `check_task`.
COMMAND_TASKS = {
    "describe": TASKS, "prepare": ("translation",), "train": TASKS, "average": TASKS, "evaluate": TASKS,
    "translate": ("translation", "lm"),  # an lm continues the prompts; an mlm generates nothing
    "score": ("translation",), "baseline": ("translation",), "inspect": ("translation",), "main": ("translation",),
    "export": ("translation", "lm"), "serve": ("translation", "lm"), "shortlist": ("translation",),
    "distill": ("translation",),  # the teacher's task: it translates its training sources
}


def check_task(command, task, where):
    """Refuses `command` on a model of `task` it does not take, with the same message for every command."""
    if task not in COMMAND_TASKS[command]:
        raise T2TError(f"t2t-keras {command} does not apply to {where}, a {task} model: it takes "
                       f"{' and '.join(COMMAND_TASKS[command])} models. For an lm or mlm run, t2t-keras evaluate "
                       "reports its perplexity.")


def refuse_flags(args, flags, what):
    """Refuses the `flags` (attribute names of `args`) given on the command line that do not apply to `what`."""
    given = [flag for flag in flags if getattr(args, flag, None) not in (None, False)]
    check_applicable([f"--{flag.replace('_', '-')}" for flag in given], what)


def _add_config_args(parser, default="base", help="preset name (configs/NAME.yaml) or a YAML file"):
    parser.add_argument("--config", default=default, help=help)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value, e.g. --set model.hidden_dim=256 (repeatable)")


def _load(args, new_run="base", **model_fields):
    from t2t_keras.config import load_config, replace, with_overrides

    if args.config is None:  # train, distill without --config: the run's own config, or `new_run` for a new run
        run = args.run_dir
        config = with_overrides(run.load_config(), args.overrides) if run.exists() else load_config(new_run,
                                                                                                     args.overrides)
    else:
        config = load_config(args.config, args.overrides)
    model_fields = {k: v for k, v in model_fields.items() if v is not None}
    return replace(config, model=model_fields) if model_fields else config


def cmd_describe(args):
    from t2t_keras.describe import describe, format_description

    if args.run_dir is not None:  # the run's own config, and the run it started from
        if args.overrides or args.vocab_size is not None:
            raise T2TError("describe --run-dir describes the run's saved config: leave out --set and --vocab-size.")
        run = args.run_dir
        info = describe(run.load_config(), args.sequence_length, init_from=run.read_json(run.init_from_path))
    else:
        info = describe(_load(args, vocab_size=args.vocab_size), args.sequence_length)
    print(json.dumps(info) if args.json else format_description(info))
    return 0


def cmd_train(args):
    from t2t_keras.pipeline import train_run
    from t2t_keras.training.init_from import InitSource

    if args.init_weights is not None and args.init_from is None:
        raise T2TError("--init-weights chooses the weights of --init-from RUN: give --init-from too.")
    init_from = (InitSource(args.init_from, args.init_weights or "auto", tuple(args.overrides))
                 if args.init_from is not None else None)
    result = train_run(_load(args), args.run_dir, minutes=args.minutes, init_from=init_from)
    print(f"trained {result.run_dir} from step {result.start_step} to {result.final_step} "
          f"in {result.seconds / 60:.1f} min")
    return 0


def cmd_prepare(args):
    from t2t_keras.tasks.data_route import format_preparation, prepare_run

    config = _load(args)
    check_task("prepare", config.task, f"--config {args.config}")
    manifest = prepare_run(config, args.run_dir)
    print(format_preparation(manifest, args.run_dir.prepared_dir))
    return 0


def cmd_average(args):
    from t2t_keras.runs import average_run

    print(average_run(args.run_dir, args.last, checkpoint=args.checkpoint))
    return 0


def _search_options(args):
    """The decoding flags given (None where left out), by their one name."""
    return dict(beam_size=args.beam_size, alpha=args.alpha, max_extra_length=args.max_extra_length)


def _run_params(args):
    """The command's `DecodingParams`: the run's (`artifacts.RunArtifact.decoding_params`) with the flags given."""
    from t2t_keras.artifacts import RunArtifact

    return RunArtifact(args.run_dir).decoding_params(**_search_options(args))


# Flags that apply to some models only, by what they set.
SEARCH_FLAGS = ("beam_size", "alpha")  # a search's: an lm export samples
# How a translation run's own model decodes; exports keep theirs.
RUN_DECODING_FLAGS = ("precision", "shards", "shortlist")
SAMPLING_FLAGS = ("temperature", "top_k", "seed")  # an lm's continuations


def _shards(text):
    """`--shards`: "auto" or a positive integer (`config.check_shards`)."""
    try:
        return check_shards(int(text) if text.lstrip("-").isdigit() else text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _run_task(run_dir):
    from t2t_keras.runs import open_run

    return open_run(run_dir).load_config().task


def cmd_evaluate(args):
    from t2t_keras.evaluation.bleu import format_scores
    from t2t_keras.evaluation.evaluate_run import evaluate_run

    if _run_task(args.run_dir) != "translation":
        from t2t_keras.evaluation.language_model import evaluate_language_model, format_perplexity
        from t2t_keras.runs import ensemble_runs

        ensemble_runs(args.run_dir, args.run_dirs[1:])  # refuses an ensemble of lm or mlm runs
        refuse_flags(args, SEARCH_FLAGS + ("max_extra_length",) + RUN_DECODING_FLAGS + ("source", "reference",
                                                                                        "output", "litert"),
                     "an lm or mlm run, whose perplexity evaluate reports")
        result = evaluate_language_model(args.run_dir, args.split, args.text, args.model)
        print(json.dumps(result) if args.json else format_perplexity(result))
        return 0
    refuse_flags(args, ("text",), "a translation run: score it with --split, or --source and --reference")
    if args.litert:
        return _evaluate_litert(args)
    result = evaluate_run(args.run_dir, args.split, args.source, args.reference, args.output, args.model,
                          params=_run_params(args), precision=args.precision, shards=args.shards,
                          ensemble=args.run_dirs[1:], shortlist=args.shortlist)
    print(json.dumps(result) if args.json else format_scores(result))
    return 0


def _evaluate_litert(args):
    """`evaluate --litert FILE`: the run's evaluation set translated by the LiteRT file, scored."""
    from t2t_keras.evaluation.bleu import format_scores
    from t2t_keras.evaluation.evaluate_run import evaluate_export
    from t2t_keras.export.opening import open_export

    check_applicable(["an ensemble"] if args.run_dirs[1:] else [], "--litert, which evaluates one file")
    refuse_flags(args, RUN_DECODING_FLAGS, "--litert: the file keeps its own search and weights")
    exported = open_export(args.litert)
    result = evaluate_export(args.run_dir, exported, args.split, args.source, args.reference, args.output,
                             params=exported.decoding_params(**_search_options(args)))
    print(json.dumps(result) if args.json else format_scores(result))
    return 0


def _read_input(path):
    from t2t_keras.data.text_files import decode_text

    if path:
        with open(path, "rb") as handle:
            return decode_text(handle.read(), path)
    return decode_text(sys.stdin.buffer.read(), "<stdin>")


def _inapplicable_decoding_flags(task, exported):
    """Decoding flags `translate` refuses: sampling is an lm's; an export keeps its own search and precision."""
    flags = SAMPLING_FLAGS if task == "translation" else ()
    flags += RUN_DECODING_FLAGS if exported or task != "translation" else ()
    return flags + (SEARCH_FLAGS if exported and task == "lm" else ())


def _opened(args, command, batch_size=32):
    """`artifacts.open_artifact` of `--run-dir`, `--saved-model`, `--ctranslate2` or `--litert`, checked to be a model
    of a task `command` takes; `--run-dir` repeated (translate) opens the first run with the others as its ensemble."""
    from t2t_keras.artifacts import open_artifact

    path = (getattr(args, "run_dir", None) or args.saved_model or getattr(args, "ctranslate2", None)
            or getattr(args, "litert", None))
    artifact = open_artifact(path, getattr(args, "model", "auto"), batch_size, getattr(args, "run_dirs", [])[1:])
    check_task(command, artifact.task, path)
    return artifact


def _given(args, flags):
    return {flag: getattr(args, flag) for flag in flags if getattr(args, flag, None) is not None}


def cmd_translate(args):
    artifact = _opened(args, "translate")
    task, exported = artifact.task, artifact.kind != "run"
    refuse_flags(args, _inapplicable_decoding_flags(task, exported),
                 f"{'an' if task == 'lm' else 'a'} {task} {'export' if exported else 'run'}")
    options = _given(args, ("beam_size", "alpha", "max_extra_length") + SAMPLING_FLAGS + RUN_DECODING_FLAGS)
    if args.terminology:
        from t2t_keras.evaluation.terminology import print_terminology_translations

        refuse_flags(args, ("alignments", "markup") + ALIGNMENT_FLAGS, "translation with --terminology")
        return print_terminology_translations(artifact, _read_input(args.input), args.terminology, options)
    if args.alignments or args.markup:
        return _translate_aligned(args, artifact, options)
    refuse_flags(args, ALIGNMENT_FLAGS, "translation without --alignments or --markup")
    for line in artifact.translate(_read_input(args.input), **options):
        print(line)
    return 0


ALIGNMENT_FLAGS = ("alignment_layer", "alignment_heads", "alignment_rows")


def _translate_aligned(args, artifact, options):
    """`translate --alignments` / `--markup` of a translation run or text SavedModel (`evaluation.aligned`)."""
    import functools

    from t2t_keras.evaluation.aligned import aligned_translations, export_pipeline, run_pipeline

    check_applicable([] if artifact.task == "translation" and artifact.kind in ("run", "saved_model") else
                     ["--alignments" if args.alignments else "--markup"],
                     f"{artifact.path}: alignments read the attention of a translation model's layers (a "
                     "--run-dir, or a --saved-model text export)")
    choice = (args.alignment_layer, args.alignment_heads, args.alignment_rows)
    if artifact.kind == "run":
        params = artifact.decoding_params(**{k: options.pop(k) for k in ("beam_size", "alpha", "max_extra_length")
                                             if k in options})
        pipeline = functools.partial(run_pipeline, args.run_dir, *choice, args.model, args.run_dirs[1:],
                                     params=params, **options)
    else:
        pipeline = functools.partial(export_pipeline, artifact, *choice, **options)
    for line in aligned_translations(pipeline, _read_input(args.input), args.markup, args.alignments,
                                     args.input or "<stdin>"):
        print(line)
    return 0


def _heads(text):
    """`--alignment-heads`: comma-separated head indices, e.g. 0,3."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected head indices like 0,3. Received: {text!r}") from None


def cmd_score(args):
    from t2t_keras.evaluation.scoring import format_score, read_score_pairs, score_pairs

    scorer = _opened(args, "score").scorer()
    pairs = read_score_pairs(args.source, args.target, scorer.max_length, scorer.piece_lengths)
    for score in score_pairs(scorer, pairs, batch_tokens=args.batch_tokens):
        print(format_score(score, args.token_level, args.json))
    return 0


def cmd_baseline(args):
    from t2t_keras.evaluation.bleu import format_scores
    from t2t_keras.evaluation.evaluate_run import evaluate_baseline

    check_task("baseline", _run_task(args.run_dir), args.run_dir)
    result = evaluate_baseline(args.run_dir, args.split)
    print(json.dumps(result) if args.json else format_scores(result))
    return 0


def cmd_shortlist(args):
    from t2t_keras.runs import learn_run_shortlist

    check_task("shortlist", _run_task(args.run_dir), args.run_dir)
    shortlist = learn_run_shortlist(args.run_dir, args.per_source, args.frequent)
    print(f"{args.run_dir.shortlist_path}: {shortlist.settings['per_source']} target pieces per source piece and "
          f"the {len(shortlist.frequent)} most frequent, from {shortlist.settings['pairs']} pairs")
    return 0


def cmd_export(args):
    task = _run_task(args.run_dir)
    check_task("export", task, args.run_dir)
    if args.quantization == "auto" and args.format != "saved_model":
        raise T2TError(f"--quantization auto applies to a SavedModel; --format {args.format} takes "
                       + ("float32, int8_float32 or int8." if args.format == "ctranslate2" else "float32 or int8."))
    if args.format == "litert":
        return _export_litert(args, task)
    refuse_flags(args, ("temperature", "top_k") if task == "translation" else
                 ("beam_size", "alpha", "max_beam_size", "ids_only", "quantization", "precision", "shortlist",
                  "constraints", "jit_compile"),
                 f"the export of a {task} run")
    if args.format == "ctranslate2":
        from t2t_keras.export.ctranslate2_export import export_ctranslate2_run

        if args.ids_only:
            raise T2TError("--ids-only applies to --format saved_model: a CTranslate2 export always takes text.")
        if task != "translation":
            raise T2TError("--format ctranslate2 holds an encoder-decoder translation model: export an lm run as a "
                           "SavedModel (the default --format).")
        refuse_flags(args, ("constraints",), "--format ctranslate2: the terms signature is a SavedModel's")
        refuse_flags(args, ("precision", "jit_compile"),
                     "--format ctranslate2: it takes --quantization float32|int8_float32|int8")
        print(export_ctranslate2_run(args.run_dir, args.out, quantization=args.quantization or "float32",
                                     average_last=args.average_last, source=args.model,
                                     overwrite=args.overwrite, params=_run_params(args), shortlist=args.shortlist))
        return 0
    return _export_saved_model(args, task)


def _export_saved_model(args, task):
    """`export` (`--format saved_model`): a SavedModel of a translation or lm run (`export.saved_model`)."""
    from t2t_keras.export.saved_model import export_run

    if args.quantization not in (None, "auto", "float32", "int8"):
        raise T2TError(f"--quantization {args.quantization} applies to --format ctranslate2; a SavedModel "
                       "takes --quantization auto (the default), float32 or int8 (int8 Dense weights).")
    options = {"text_signatures": False} if args.ids_only else {}  # only what was asked: an lm takes neither
    if task == "translation":
        quantization = args.quantization or "auto"
        options["quantization"] = None if quantization == "float32" else quantization
    if args.precision is not None:
        options["precision"] = args.precision
    if args.jit_compile is not None:
        options["jit_compile"] = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    for flag in ("shortlist", "constraints"):
        if getattr(args, flag):
            options[flag] = True
    print(export_run(args.run_dir, args.out, average_last=args.average_last, source=args.model,
                     params=_run_params(args), max_beam_size=args.max_beam_size, temperature=args.temperature,
                     top_k=args.top_k, overwrite=args.overwrite, **options))
    return 0


def _export_litert(args, task):
    """`export --format litert`: one .tflite file of a translation run (`export.litert_export`)."""
    from t2t_keras.export.litert_export import check_litert_task, export_litert_run

    check_litert_task(task, args.run_dir)
    refuse_flags(args, ("temperature", "top_k", "ids_only", "shortlist", "constraints"),
                 "--format litert: the file holds the beam search over the whole vocabulary, on text, without terms")
    refuse_flags(args, ("precision", "jit_compile"), "--format litert: it takes --quantization float32|int8")
    print(export_litert_run(args.run_dir, args.out, quantization=args.quantization or "float32",
                            average_last=args.average_last, source=args.model, overwrite=args.overwrite,
                            params=_run_params(args), max_beam_size=args.max_beam_size))
    return 0


def cmd_serve(args):
    from t2t_keras.serving.server import serve

    def opened():  # called by the server once it listens: it answers "loading" meanwhile
        artifact = _opened(args, "serve", args.max_batch_size)
        if artifact.kind == "run":
            raise T2TError(f"{artifact.path} is a run directory: serve its export (t2t-keras export --run-dir "
                           f"{artifact.path} --out DIR).")
        return artifact

    serve(opened, host=args.host, port=args.port, model_name=args.model_name,
          max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
          drain_seconds=args.drain_seconds)
    return 0


def cmd_inspect(args):
    from t2t_keras.inspect.inspect_run import inspect_run

    _opened(args, "inspect")
    result = inspect_run(run_dir=args.run_dir, saved_model=args.saved_model, text=args.text, out=args.out,
                         reference=args.reference)
    print(f"wrote {len(result.images)} heatmaps and {result.html}")
    return 0


def cmd_distill(args):
    from t2t_keras.distillation.distill import distill, format_distillation
    from t2t_keras.runs import open_run

    if open_run(args.teacher).exists():  # a missing teacher is the library's error, naming --teacher
        check_task("distill", _run_task(args.teacher), args.teacher)
    config, where, original_weight = _student_config(args)
    result = distill(args.teacher, args.run_dir, config, minutes=args.minutes, overrides=tuple(args.overrides),
                     beam_size=args.beam_size, original_weight=original_weight,
                     teacher_weights=args.teacher_weights, shard_sentences=args.shard_sentences, where=where)
    print(format_distillation(result))
    return 0


def _student_config(args):
    """`(config, where, original_weight)` of `distill`: --config's, else the student run's own (resumed with the
    original weight it was distilled with, unless --original-weight is given), else STUDENT_PRESET's."""
    from t2t_keras.distillation.student import recorded_original_weight

    config = _load(args, new_run=STUDENT_PRESET)
    if args.config is not None:
        return config, f"--config {args.config}", args.original_weight
    if not args.run_dir.exists():
        return config, f"--config {STUDENT_PRESET}", args.original_weight
    weight = args.original_weight if args.original_weight is not None else recorded_original_weight(config)
    return config, f"the config of {args.run_dir.path}", weight


def cmd_main(args):
    from t2t_keras.config import load_config
    from t2t_keras.main_job import format_report, run_main_job

    check_task("main", load_config(args.config, args.overrides).task, f"--config {args.config}")
    report = run_main_job(args.run_dir, args.config, args.minutes, args.overrides)
    print(format_report(report))
    return 0


def _add_decoding_args(parser):
    _add_search_args(parser, "")
    parser.add_argument("--precision", choices=DECODING_PRECISIONS,
                        help="weights of a run's model while decoding (default: decoding.precision); bfloat16 is "
                             "faster for large models and batches on CPUs with bfloat16 units")
    parser.add_argument("--shards", type=_shards,
                        help="a run's batch decoded as this many concurrent searches, or auto: one per CPU core, one "
                             "on a GPU or TPU (default: decoding.shards); the tokens do not depend on it")
    parser.add_argument("--shortlist", action="store_true", default=None,
                        help="a run's search covers, per batch, only the target pieces of its vocabulary shortlist "
                             "(RUN/shortlist.npz, made by t2t-keras shortlist); off by default")
    _add_model_arg(parser)


def _add_model_arg(parser, extra=""):
    parser.add_argument("--model", default="auto", choices=MODEL_SOURCES,
                        help="which weights of the run: the averaged checkpoints (auto: when they include the newest "
                             "one), the newest checkpoint, or the best one (RUN/best/, kept when "
                             f"training.eval_every_steps is set){extra}")


def _add_search_args(parser, what):
    """--beam-size, --alpha, --max-extra-length: `DecodingParams` by their names (default: the run's decoding.*)."""
    parser.add_argument("--beam-size", type=int, help=f"{what}beam size, 1 for greedy search (decoding.beam_size)")
    parser.add_argument("--alpha", type=float, help=f"{what}length penalty ((5+|Y|)/6)^alpha (decoding.alpha)")
    parser.add_argument("--max-extra-length", "--extra-length", type=int, dest="max_extra_length",
                        help=f"{what}output limit: input length + this; an lm's new pieces (decoding.max_extra_length)")


def _add_sampling_args(parser):
    parser.add_argument("--temperature", type=float,
                        help="lm: sample the continuation at this temperature (default 0: greedy argmax)")
    parser.add_argument("--top-k", type=int, help="lm: sample among the k most likely pieces (default 0: all)")
    parser.add_argument("--seed", type=int, help="lm: seed of the sampler")


def _add_model_choice(parser, saved_model, ctranslate2, ensembles=False, litert=None):
    """Exactly one of --run-dir, --saved-model DIR, --ctranslate2 DIR (and, given its help, --litert FILE); with
    `ensembles`, --run-dir repeated."""
    where = parser.add_mutually_exclusive_group(required=True)
    if ensembles:
        _add_run_dirs(where)
    else:
        where.add_argument("--run-dir")
    where.add_argument("--saved-model", help=saved_model)
    where.add_argument("--ctranslate2", metavar="DIR", help=ctranslate2)
    if litert:
        where.add_argument("--litert", metavar="FILE", help=litert)


def _add_run_dirs(parser, required=False):
    """--run-dir, repeatable: one run, or several translation runs of one vocabulary decoding as an ensemble."""
    parser.add_argument("--run-dir", dest="run_dirs", action="append", required=required, metavar="RUN_DIR",
                        help="the run; given several times, the runs' models decode together, their "
                             "log-probabilities averaged at each step (translation runs of one vocabulary; the "
                             "decoding settings are the first run's)")


def build_parser():
    parser = argparse.ArgumentParser(prog="t2t-keras", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("describe", help="print the architecture, parameter count and training FLOPs")
    _add_config_args(p)
    p.add_argument("--vocab-size", type=int, help="vocabulary size (default: the config's model.vocab_size)")
    p.add_argument("--sequence-length", type=int, default=32, help="sequence length for the FLOP count")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--run-dir", help="describe this run's saved config instead, and the run it started from "
                                     "(train --init-from)")
    p.set_defaults(handler=cmd_describe)

    p = commands.add_parser("prepare", help="tokenize the training corpus once into shards in RUN/prepared/ "
                                           "(translation; train then reads them)")
    _add_config_args(p)
    p.add_argument("--run-dir", required=True, help="the run directory to prepare (config.yaml is written there)")
    p.set_defaults(handler=cmd_prepare)

    p = commands.add_parser("train", help="train a model, or continue the run in --run-dir")
    _add_config_args(p, default=None, help="preset name (configs/NAME.yaml) or a YAML file (default: the run's own "
                                           "config when --run-dir holds a run, else base)")
    p.add_argument("--run-dir", required=True, help="directory for config, vocabulary, checkpoints and logs")
    p.add_argument("--minutes", type=float, help="stop after this many minutes of training")
    p.add_argument("--init-from", metavar="RUN",
                   help="start a new run from this trained run's weights and tokenizer (its model and vocabulary "
                        "are kept, or fewer of its layers with --set model.num_layers / num_decoder_layers; the "
                        "optimizer and learning rate schedule start afresh); a run with checkpoints of its own "
                        "resumes from them")
    p.add_argument("--init-weights", choices=MODEL_SOURCES,
                   help="which weights of --init-from: those export takes (auto, the default), the averaged, the "
                        "latest or the best checkpoint")
    p.set_defaults(handler=cmd_train)

    p = commands.add_parser("average", help="average the last checkpoints of a run (section 6.1)")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--last", type=int, help="how many checkpoints (default: training.average_last)")
    p.add_argument("--checkpoint", default="last", choices=("last", "best"),
                   help="average the checkpoints ending at the last one (default) or at the best one (RUN/best/)")
    p.set_defaults(handler=cmd_average)

    p = commands.add_parser("evaluate", help="translate a split or files and report sacreBLEU, chrF; perplexity "
                                          "for lm and mlm runs")
    _add_run_dirs(p, required=True)
    p.add_argument("--split", default="test", choices=("dev", "test"))
    p.add_argument("--source", help="source file (with --reference, instead of --split)")
    p.add_argument("--reference", help="reference translations of --source")
    p.add_argument("--output", help="also write the translations to this file")
    p.add_argument("--text", help="lm / mlm runs: perplexity on this file (one sentence per line) instead of --split")
    p.add_argument("--litert", metavar="FILE", help="translation runs: translate with this LiteRT file (export "
                                                   "--format litert) instead of the run's model")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_decoding_args(p)
    p.set_defaults(handler=cmd_evaluate)

    p = commands.add_parser("translate", help="translate lines from --input or stdin, one per line")
    _add_model_choice(p, saved_model="an exported SavedModel directory",
                      ctranslate2="a CTranslate2 export (export --format ctranslate2)", ensembles=True,
                      litert="a LiteRT file (export --format litert), run by the LiteRT interpreter")
    p.add_argument("--input", help="file to translate (default: stdin); for an lm run, prompts to continue")
    p.add_argument("--alignments", action="store_true",
                   help="print TRANSLATION<TAB>ALIGNMENTS: Pharaoh i-j word links from the cross-attention")
    p.add_argument("--markup", action="store_true",
                   help="lines hold inline tags (<b>...</b>, <br/>): translate the text, place the tags by alignment")
    p.add_argument("--alignment-layer", type=int, help="decoder layer read (default decoding.alignment_layer)")
    p.add_argument("--alignment-heads", type=_heads, help="heads averaged, e.g. 0,3 (default decoding.alignment_heads)")
    p.add_argument("--alignment-rows", choices=ALIGNMENT_ROWS,
                   help="a target word's attention: of the steps that output it, or read it (decoding.alignment_rows)")
    _add_decoding_args(p)
    _add_sampling_args(p)
    p.add_argument("--terminology", metavar="FILE",
                   help="a translation run's translations hold the target term of each source term found in their "
                        "sentence: a UTF-8 file of 'source term<TAB>target term' lines (constrained beam search)")
    p.set_defaults(handler=cmd_translate)

    p = commands.add_parser("score", help="forced decoding: negative log-likelihood of given translations")
    _add_model_choice(p, saved_model="an exported SavedModel directory (its 'score' signature)",
                      ctranslate2="a CTranslate2 export (its score_batch)")
    p.add_argument("--source", required=True, help="source sentences, one per line")
    p.add_argument("--target", required=True, help="their translations, line by line")
    p.add_argument("--token-level", action="store_true", help="also print the negative log-likelihood of each token")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch")
    _add_model_arg(p)
    p.set_defaults(handler=cmd_score)

    p = commands.add_parser("baseline", help="score the retrieval baseline on a split of the run's data")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--split", default="test", choices=("dev", "test"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_baseline)

    p = commands.add_parser("export", help="write a SavedModel (strings in, translations out) or a CTranslate2 model")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--out", required=True, help="export directory, or the .tflite file of --format litert (written "
                                                "atomically)")
    p.add_argument("--format", default="saved_model", choices=("saved_model", "ctranslate2", "litert"),
                   help="a TensorFlow SavedModel, a CTranslate2 model directory with the SentencePiece model, or one "
                        "LiteRT .tflite file with the tokenizer and beam search inside")
    p.add_argument("--quantization", choices=("auto", "float32", "int8_float32", "int8"),
                   help="weight type: CTranslate2 float32 (default), int8_float32 or int8; SavedModel auto (the "
                        "default: int8 Dense weights where they measured faster, by model size and CPU), float32 "
                        "or int8; LiteRT float32 (default) or int8 (dynamic range)")
    p.add_argument("--precision", choices=DECODING_PRECISIONS,
                   help="SavedModel: bfloat16 weights and arithmetic (oneDNN's bfloat16 kernels where the CPU has "
                        "them; not with --quantization); default float32")
    p.add_argument("--jit-compile", choices=("auto", "true", "false"),
                   help="SavedModel searches compiled with XLA: false (the default) none, every search in graph "
                        "mode; auto those of batches under 128 hypotheses (rows padded to a power of two x beam size), "
                        "greedy or at the default beam size, float32 weights: faster once each shape has compiled, "
                        "for long-running servers; true every search")
    p.add_argument("--ids-only", action="store_true",
                   help="SavedModel on token ids only (core TensorFlow ops; loads in stock TF Serving)")
    p.add_argument("--average-last", type=int, help="average the last N checkpoints first (with --model best: "
                   "the N ending at the best one)")
    _add_model_arg(p, "; with --average-last, the N checkpoints ending at the best one for best")
    _add_search_args(p, "the export's default ")
    p.add_argument("--max-beam-size", type=int, help="largest beam size callers may ask for "
                   "(default: decoding.max_beam_size)")
    p.add_argument("--temperature", type=float, help="lm: default sampling temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, help="lm: default top-k of the sampler (default 0: all pieces)")
    p.add_argument("--shortlist", action="store_true", default=None,
                   help="apply the run's vocabulary shortlist (RUN/shortlist.npz) in the export: in the SavedModel's "
                        "graph, or as CTranslate2's vmap.txt (translate with use_vmap=True)")
    p.add_argument("--constraints", action="store_true", default=None,
                   help="a SavedModel text export also gets the translate_constrained signature: translations that "
                        "hold given target terms (REST requests with \"constraints\")")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export")
    p.set_defaults(handler=cmd_export)

    p = commands.add_parser("shortlist", help="learn a run's vocabulary shortlist from its training corpus "
                                              "(RUN/shortlist.npz)")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--per-source", type=int, help="target pieces kept per source piece (default 50)")
    p.add_argument("--frequent", type=int, help="most frequent target pieces, always allowed (default 100)")
    p.set_defaults(handler=cmd_shortlist)

    p = commands.add_parser("serve", help="serve a SavedModel or CTranslate2 export over TensorFlow Serving's REST API")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--saved-model", help="an exported SavedModel directory")
    where.add_argument("--ctranslate2", metavar="DIR", help="a CTranslate2 export (same API, batching and limits)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--model-name", default="default",
                   help="NAME in /v1/models/NAME:predict (TF Serving's default: default)")
    p.add_argument("--max-batch-size", type=int, default=32, help="sentences batched together at most")
    p.add_argument("--max-wait-ms", type=float, default=10, help="how long a request may wait for others")
    p.add_argument("--max-queue", type=int,
                   help="sentences held at once, waiting or being translated; past it a request gets 503 with "
                        "Retry-After at once (default: 4 x --max-batch-size)")
    p.add_argument("--drain-seconds", type=float,
                   help="after SIGTERM or SIGINT, how long accepted requests may take to be answered while new ones "
                        "get 503; then the server stops (default 20)")
    p.set_defaults(handler=cmd_serve)

    p = commands.add_parser("inspect", help="attention heatmaps (PNG) and an interactive HTML page for a sentence")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-dir")
    where.add_argument("--saved-model")
    p.add_argument("--text", required=True, help="the source sentence")
    p.add_argument("--reference", help="a target sentence to inspect instead of the model's own translation")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(handler=cmd_inspect)

    p = commands.add_parser("distill", help="sequence-level knowledge distillation: translate the teacher's training "
                                            "sources with the teacher, then train a student run on them")
    p.add_argument("--teacher", required=True, metavar="RUN", help="the trained translation run that translates")
    p.add_argument("--run-dir", required=True, help="the student run: its distilled corpus (RUN/distilled/), "
                                                    "config, vocabulary (the teacher's), checkpoints and logs")
    _add_config_args(p, default=None, help="the student's preset name (configs/NAME.yaml) or a YAML file (default: "
                                           f"the student run's own config when --run-dir holds one, else "
                                           f"{STUDENT_PRESET})")
    p.add_argument("--beam", "--beam-size", dest="beam_size", type=int, default=4,
                   help="the teacher's beam size (default 4; alpha and the output limit are the teacher's decoding.*)")
    p.add_argument("--minutes", type=float, help="stop the student's training after this many minutes")
    p.add_argument("--original-weight", type=float, metavar="W",
                   help="also train on the teacher's own corpus, drawn with weight W against the distilled corpus's "
                        "1 (data.sources); default: the distilled corpus alone")
    p.add_argument("--teacher-weights", choices=MODEL_SOURCES, default="auto",
                   help="which weights of the teacher translate: those export takes (auto), the averaged, the latest "
                        "or the best checkpoint")
    p.add_argument("--shard-sentences", type=int, default=2000,
                   help="sentences per shard of the distilled corpus: a resumed distillation skips the shards done")
    p.set_defaults(handler=cmd_distill)

    p = commands.add_parser("main", help="the main job: train, average, evaluate, export, translate, report")
    _add_config_args(p)
    p.set_defaults(config="mini")
    p.add_argument("--run-dir", default="runs/main")
    p.add_argument("--minutes", type=float, default=30.0, help="training time budget of this invocation")
    p.set_defaults(handler=cmd_main)
    return parser


# Commands whose process decodes a run and trains nothing: their float32 searches run without oneDNN.
DECODING_COMMANDS = ("translate", "evaluate")


def _choose_kernels(args):
    """`--saved-model`: `kernel_choice.choose_onednn` and `thread_choice.choose_intra_op_threads`; `translate` and
    `evaluate` with `--run-dir`: `kernel_choice.choose_onednn_for_runs`. Made before anything imports TensorFlow,
    which reads both once. Returns what each set (None: nothing)."""
    from t2t_keras.export.kernel_choice import choose_onednn, choose_onednn_for_runs
    from t2t_keras.export.thread_choice import choose_intra_op_threads

    if getattr(args, "saved_model", None):
        return choose_onednn(args.saved_model), choose_intra_op_threads(args.saved_model)
    if args.command in DECODING_COMMANDS and getattr(args, "run_dirs", None) and not getattr(args, "litert", None):
        return choose_onednn_for_runs(args.run_dirs, getattr(args, "precision", None)), None
    return None, None


def _log_kernels(onednn, threads):
    logger = logging.getLogger(__name__)
    if onednn is not None:
        logger.info("A float32 search: TensorFlow's own CPU kernels, not oneDNN's (TF_ENABLE_ONEDNN_OPTS=%s; set "
                    "TF_ENABLE_ONEDNN_OPTS=1 to keep them).", onednn)
    if threads is not None:
        logger.info("A narrow export searching in shards: %s thread(s) per op, each shard on its share of the cores "
                    "(TF_NUM_INTRAOP_THREADS=%s; set it yourself to choose).", threads, threads)


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter off the terminal
    args = build_parser().parse_args(argv)
    kernels = _choose_kernels(args)
    try:  # the commands (data, training, the searches, export, serving) run on TensorFlow
        require_tensorflow_backend(f"t2t-keras {args.command}", requested_backend())
    except T2TError as error:
        print(f"t2t-keras {args.command}: error: {error}", file=sys.stderr)
        return 2
    if getattr(args, "run_dirs", None):  # translate, evaluate: the first run, and the others of an ensemble
        from t2t_keras.runs import open_run

        args.run_dirs = [open_run(path) for path in args.run_dirs]
        args.run_dir = args.run_dirs[0]
    elif hasattr(args, "run_dirs"):  # translate --saved-model or --ctranslate2
        args.run_dirs, args.run_dir = [], None
    elif getattr(args, "run_dir", None) is not None:
        from t2t_keras.runs import open_run

        args.run_dir = open_run(args.run_dir)  # opened once; every step of the command takes it
    # Our progress at INFO; other libraries' (TensorFlow's and absl's export chatter) from WARNING up.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("t2t_keras").setLevel(logging.INFO)
    _log_kernels(*kernels)
    try:
        return args.handler(args)
    except (T2TError, FileNotFoundError, FileExistsError) as error:
        print(f"t2t-keras {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
