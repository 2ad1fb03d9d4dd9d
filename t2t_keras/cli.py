"""The `t2t-keras` command line: parse the arguments (`cli_arguments`), open what they name, build the request,
call the library.

Every choice is the library's: which tasks a command takes, which settings an artifact honours, what an export
format accepts. A command here only hands its flags on, by their one name.
"""

import json
import logging
import sys

from t2t_keras.backends import requested_backend, require_tensorflow_backend
from t2t_keras.cli_arguments import STUDENT_PRESET, build_parser
from t2t_keras.errors import T2TError

# The flags that set a field of a `decoding.request.GenerationRequest`, by the field's name.
REQUEST_FLAGS = ("beam_size", "alpha", "length_penalty", "stopping", "max_extra_length", "max_output_length",
                 "end_at_limit", "temperature", "top_k", "top_p", "epsilon", "seed", "num_return", "alignments",
                 "alignment_layer", "alignment_heads", "alignment_rows", "src_lang", "tgt_lang", "mbr", "candidates",
                 "candidates_from", "mbr_aggregate", "quality", "min_quality")
# The flags that choose how a run's own model decodes (`artifacts.open_artifact`).
OPEN_FLAGS = ("model", "precision", "shards", "shortlist")


def _given(args, names):
    """The flags of `names` the command line set (argparse leaves the others None; `--end-at-limit false` is
    False)."""
    return {name: value for name, value in vars(args).items() if name in names and value is not None}


def _open(args, **options):
    """The artifact `--run-dir` (the first; the others its ensemble), `--saved-model`, `--ctranslate2` or
    `--litert` names, opened with the flags that choose how a run decodes."""
    from t2t_keras.artifacts import open_artifact

    runs = args.run_dirs or []
    return open_artifact(args.path or runs[0], ensemble=runs[1:], **_given(args, OPEN_FLAGS), **options)


def _read_input(path):
    from t2t_keras.data.text_files import decode_text

    return decode_text(*_read_bytes(path))


def _read_bytes(path):
    """The bytes of `path`, or of stdin when it is None, and the name errors give them."""
    from t2t_keras.data.text_files import read_user_file

    if path:
        return read_user_file(path, "give the input file's path, or no --input to read standard input."), path
    return sys.stdin.buffer.read(), "<stdin>"


def cmd_describe(args):
    from t2t_keras.describe import describe_command, format_description

    info = describe_command(args.run_dir, args.config, args.overrides, args.vocab_size, args.sequence_length)
    print(json.dumps(info) if args.json else format_description(info))
    return 0


def cmd_train(args):
    from t2t_keras.pipeline import train_run
    from t2t_keras.resolved_run import init_source, resolve_run

    init_from = init_source(args.init_from, args.init_weights, args.overrides)
    resolved = resolve_run(args.run_dir, args.config, args.overrides, init_from)  # before anything is opened
    result = train_run(resolved, minutes=args.minutes)
    print(f"trained {result.run_dir} from step {result.start_step} to {result.final_step} "
          f"in {result.seconds / 60:.1f} min")
    return 0


def cmd_prepare(args):
    from t2t_keras.config import load_config
    from t2t_keras.tasks.data_route import format_preparation, prepare_run

    config = load_config(args.config, args.overrides)
    if args.runner:  # the corpus pipeline on Apache Beam (`beam.corpus_command`)
        from t2t_keras.beam.corpus_command import prepare_command

        manifest = prepare_command(config, args.run_dir, args.runner, args.workers, args.pipeline_flags,
                                   max_ratio=args.max_length_ratio)
    else:
        manifest = prepare_run(config, args.run_dir, where=f"--config {args.config}")
    print(format_preparation(manifest, args.run_dir))
    return 0


def cmd_average(args):
    from t2t_keras.runs import average_run

    print(average_run(args.run_dir, args.last, checkpoint=args.checkpoint))
    return 0


def cmd_evaluate(args):
    from t2t_keras.artifacts import open_artifact
    from t2t_keras.evaluation.evaluate_run import evaluate_command, format_result

    artifact = open_artifact(args.litert) if args.litert else _open(args, progress=True)
    result = evaluate_command(artifact, args.run_dirs[0], args.split, source=args.source, reference=args.reference,
                              output=args.output, text=args.text, bleu=args.bleu, **_given(args, REQUEST_FLAGS))
    print(json.dumps(result) if args.json else format_result(result))
    return 0


def cmd_translate(args):
    from t2t_keras.decoding.request import SHORTLIST_WITH_TERMS, check_alignment_details

    if args.runner:
        return _on_runner(args)
    if args.terminology and args.shortlist:
        raise T2TError(SHORTLIST_WITH_TERMS)  # the flags clash before any file is read
    given = _given(args, REQUEST_FLAGS)
    if given.get("quality") or args.min_quality is not None:
        return _translate_with_quality(args, given)
    check_alignment_details(given, args.alignments or args.markup)
    artifact = _open(args)
    request, lines = artifact.request(**given), _read_input(args.input)
    if args.terminology:
        from t2t_keras.evaluation.terminology import print_terminology_translations

        return print_terminology_translations(artifact, lines, args.terminology, request)
    if args.alignments or args.markup:
        from t2t_keras.evaluation.aligned import aligned_translations

        outputs = aligned_translations(artifact, lines, request, args.markup, args.input or "<stdin>")
    else:  # with --num-return N, a line's N translations (samples, or an n-best list) tab-separated, best first
        outputs = ["\t".join(texts) for texts in artifact.generate(lines, request).texts]
    for line in outputs:
        print(line)
    return 0


def _translate_with_quality(args, given):
    """translate --with-quality / --min-quality: TRANSLATION<TAB>QUALITY lines, or an empty line (listed in the
    side file) below --min-quality."""
    from t2t_keras.evaluation.quality_lines import low_quality_path, quality_outputs, write_withheld

    clashing = [flag for flag, value in (("--terminology", args.terminology), ("--alignments", args.alignments),
                                         ("--markup", args.markup)) if value]
    if clashing:
        raise T2TError(f"--with-quality and --min-quality go with plain translations: leave out {', '.join(clashing)}.")
    side_file = low_quality_path(args.input, args.low_quality_file) if args.min_quality is not None else None
    artifact = _open(args)
    request, lines = artifact.request(**given), _read_input(args.input)
    outputs, withheld = quality_outputs(lines, artifact.generate(lines, request), request.quality,
                                        request.min_quality)
    if side_file is not None:
        write_withheld(side_file, withheld)
    for line in outputs:
        print(line)
    return 0


def cmd_qe_train(args):
    from t2t_keras.evaluation.quality_estimate import format_training, train_quality_estimate

    result = train_quality_estimate(args.run_dir, args.split, args.source, args.reference, args.limit,
                                    **_given(args, REQUEST_FLAGS))
    print(json.dumps(result) if args.json else format_training(result))
    return 0


def _on_runner(args):
    """translate / score --runner: the corpus as an Apache Beam pipeline (`beam.commands`)."""
    from t2t_keras.beam import commands

    runs = args.run_dirs or []
    options = dict(_given(args, OPEN_FLAGS), **({"ensemble": runs[1:]} if runs[1:] else {}))
    if args.command == "score":
        return commands.score_command(args, args.path or runs[0], options, args.pipeline_flags)
    return commands.translate_command(args, args.path or runs[0], options, _given(args, REQUEST_FLAGS),
                                      args.pipeline_flags)


def cmd_score(args):
    from t2t_keras.evaluation.scoring import format_score, read_score_pairs, read_tab_separated_pairs

    if args.runner:
        return _on_runner(args)
    if (args.source is None) != (args.target is None):
        raise T2TError("--source and --target go together (two aligned files); without both, score reads "
                       "SOURCE<TAB>TARGET lines from --input or stdin.")
    if args.source is not None and args.input is not None:
        raise T2TError("Give the pairs either as --source and --target files or as SOURCE<TAB>TARGET lines "
                       "(--input or stdin), not both.")
    given = _read_bytes(args.input) if args.input is not None else None  # a missing file fails before the model
    artifact = _open(args)
    artifact.require("score")  # before stdin is read: a model that cannot score is refused at once
    if args.source is not None:
        pairs = read_score_pairs(args.source, args.target, artifact.max_length, artifact.piece_lengths)
    else:
        data, origin = given or _read_bytes(None)
        pairs = read_tab_separated_pairs(data, origin, artifact.max_length, artifact.piece_lengths)
    for score in artifact.score(pairs, batch_tokens=args.batch_tokens):
        print(format_score(score, args.token_level, args.json))
    return 0


def cmd_baseline(args):
    from t2t_keras.evaluation.bleu import format_scores
    from t2t_keras.evaluation.evaluate_run import evaluate_baseline

    result = evaluate_baseline(args.run_dir, args.split)
    print(json.dumps(result) if args.json else format_scores(result))
    return 0


def cmd_shortlist(args):
    from t2t_keras.runs import format_shortlist, learn_run_shortlist

    print(format_shortlist(args.run_dir, learn_run_shortlist(args.run_dir, args.per_source, args.frequent)))
    return 0


def cmd_export(args):
    from t2t_keras.export.formats import EXPORT_OPTIONS, export_format

    print(export_format(args.run_dir, args.out, args.format, **_given(args, EXPORT_OPTIONS)))
    return 0


def cmd_serve(args):
    from t2t_keras.artifacts import open_artifact
    from t2t_keras.serving.served_model import check_servable_path
    from t2t_keras.serving.server import serve
    from t2t_keras.serving.version_source import VersionDirectory, check_base_path

    if args.model_base_path is not None:  # numbered versions, polled and opened by the server once it listens
        check_base_path(args.model_base_path)
        export = VersionDirectory(args.model_base_path, args.file_system_poll_wait_seconds)
    else:
        check_servable_path(args.path)  # before the port opens

        def export():  # called by the server once it listens: it answers "loading" meanwhile
            return open_artifact(args.path, batch_size=args.max_batch_size)

    serve(export, host=args.host, port=args.port, model_name=args.model_name, max_batch_size=args.max_batch_size,
          max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, drain_seconds=args.drain_seconds,
          max_queue_seconds=args.max_queue_seconds, deadline_seconds=args.deadline_seconds, access_log=args.access_log,
          access_log_text=args.access_log_text)
    return 0


def cmd_inspect(args):
    from t2t_keras.inspect.inspect_run import inspect_run

    result = inspect_run(args.path, text=args.text, out=args.out, reference=args.reference)
    print(f"wrote {len(result.images)} heatmaps and {result.html}")
    return 0


def cmd_distill(args):
    from t2t_keras.distillation.distill import distill, format_distillation
    from t2t_keras.distillation.student import chosen_student_config

    config, where, weight = chosen_student_config(args.run_dir, args.config, args.overrides, args.original_weight,
                                                  STUDENT_PRESET)
    result = distill(args.teacher, args.run_dir, config, minutes=args.minutes, overrides=tuple(args.overrides),
                     beam_size=args.beam_size, original_weight=weight, teacher_weights=args.teacher_weights,
                     shard_sentences=args.shard_sentences, where=where, runner=_runner_choice(args))
    print(format_distillation(result))
    return 0


def _runner_choice(args):
    """distill --runner: the teacher's pass as a Beam pipeline; None without it."""
    if not args.runner:
        return None
    from t2t_keras.beam.teacher_pass import runner_choice

    return runner_choice(args.runner, args.workers, args.pipeline_flags)


def cmd_import(args):
    from t2t_keras.pretrained.importer import import_checkpoint

    print(import_checkpoint(args.family, args.checkpoint, args.run_dir, args.source_lang, args.target_lang,
                            args.precision))
    return 0


def cmd_main(args):
    from t2t_keras.main_job import format_report, run_main_job

    print(format_report(run_main_job(args.run_dir, args.config, args.minutes, args.overrides)))
    return 0


COMMANDS = {name[4:].replace("_", "-"): function for name, function in globals().items() if name.startswith("cmd_")}


def needs_tensorflow(args):
    """Whether the command runs on TensorFlow: every one but those that read a CTranslate2 export (translate,
    score, serve; serve --model-base-path whose versions are all CTranslate2 exports), the CPU production road,
    whose processes load CTranslate2 and SentencePiece alone. (A SavedModel version that comes later imports
    TensorFlow when it is loaded.)"""
    from t2t_keras.artifacts.opening import is_ctranslate2_export

    base_path = getattr(args, "model_base_path", None)
    if base_path:
        from t2t_keras.switches import version_directories

        try:
            versions = version_directories(base_path)
        except OSError:  # not a directory: the command says so
            versions = {}
        return not versions or not all(is_ctranslate2_export(path) for path in versions.values())
    path = getattr(args, "path", None)
    return not (path and not getattr(args, "run_dirs", None) and is_ctranslate2_export(path))


def main(argv=None):
    from t2t_keras.quiet_start import import_tensorflow_quietly
    from t2t_keras.switches import command_switches

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "runner", None):  # only a pipeline takes flags of its own: Beam's options
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.pipeline_flags = extra
    tensorflow = needs_tensorflow(args)
    try:  # the commands (data, training, the searches, export, serving) run on TensorFlow
        if tensorflow:
            require_tensorflow_backend(f"t2t-keras {args.command}", requested_backend())
    except T2TError as error:
        print(f"t2t-keras {args.command}: error: {error}", file=sys.stderr)
        return 2
    # Our progress at INFO; other libraries' (TensorFlow's and absl's export chatter) from WARNING up.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("t2t_keras").setLevel(logging.INFO)
    try:
        with command_switches(args.command, vars(args)):  # before TensorFlow loads; restored when it ends
            if tensorflow:
                import_tensorflow_quietly(args.verbose)  # its start-up lines kept off the command's output
            return COMMANDS[args.command](args)
    except T2TError as error:  # raised for what the user gave: one line; any other error is a bug, with its traceback
        print(f"t2t-keras {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
