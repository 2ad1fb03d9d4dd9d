"""The command line's `--runner` road: translate and score a corpus as a Beam pipeline.

Everything a user can get wrong is refused before the pipeline starts: a missing artifact, one that does not do
what is asked (or a request it does not take: the artifact is opened once here to check), a glob matching
nothing, an output that exists without --overwrite.
"""

import logging

from t2t_keras.beam import line_pipeline, pipeline_paths, runner_options
from t2t_keras.beam.artifact_handler import ArtifactHandler
from t2t_keras.errors import DataError, T2TError

logger = logging.getLogger(__name__)

# Beam's local runner fails the whole pipeline when one of its worker processes stops (it does not give the lost
# bundle to another worker): the command runs it again from the start this many times, as Dataflow, Flink and
# Spark retry a lost worker's work themselves.
LOST_WORKER_RERUNS = 1
# translate's flags whose outputs are not one line per line of plain text: not on the pipeline road
PLAIN_ONLY = (("--alignments", "alignments"), ("--markup", "markup"), ("--terminology", "terminology"),
              ("--with-quality", "quality"), ("--min-quality", "min_quality"))


def run_lines(args, path, handler, check, extra=()):
    """Runs the line pipeline of `handler` over `--input` into `--output`; returns its `Plan`."""
    import apache_beam as beam

    if not args.input or not args.output:
        raise T2TError("--runner reads --input GLOB and writes --output PATH: give both.")
    pipeline_paths.check_artifact(path)
    plan = pipeline_paths.plan_files(args.input, args.output, overwrite=args.overwrite)
    handler.load_model()  # refuses what the artifact cannot do before any worker starts
    retry = ArtifactHandler(**dict(_handler_arguments(handler), max_batch_size=1))
    options = runner_options.pipeline_options(args.runner, args.workers, extra)
    for attempt in range(1 + LOST_WORKER_RERUNS):
        pipeline_paths.clear_previous(plan)  # an old dead-letter file never counts for this run
        try:
            with beam.Pipeline(options=options) as pipeline:
                line_pipeline.build_line_pipeline(pipeline, plan, handler, retry, check, args.max_errors)
            return plan
        except Exception as error:
            failure = _failure(error, plan, args)
            if failure is error:
                raise
            if _rerun(args, error, attempt):
                continue
            raise failure from error


def _rerun(args, error, attempt):
    """Whether a pipeline the local runner lost a worker of runs again from the start (what it wrote is gone)."""
    if attempt >= LOST_WORKER_RERUNS or args.runner != "direct" or not runner_options.lost_worker(error):
        return False
    logger.warning("A worker process of the pipeline stopped mid-run (%s); running the pipeline again from the "
                   "start (%d of %d).", str(error).strip()[:200], attempt + 1, LOST_WORKER_RERUNS)
    return True


def _handler_arguments(handler):
    return dict(path=handler.path, open_options=handler.open_options, request=handler.request,
                operation=handler.operation, max_batch_size=handler.max_batch_size,
                score_format=handler.score_format, batch_tokens=handler.batch_tokens,
                batch_size=handler.batch_size, threads=handler.threads)


def _failure(error, plan, args):
    """The error a failed pipeline ends the command with: too many bad lines in one line (their dead-letter file
    kept); else, with what the run wrote removed (`pipeline_paths.remove_written`) so that the same command runs
    again, a worker process of the local runner that stopped in one line, or Beam's own error."""
    from apache_beam.io.filesystems import FileSystems

    max_errors = args.max_errors
    if max_errors is not None and FileSystems.exists(plan.errors):
        with FileSystems.open(plan.errors) as handle:
            count = sum(1 for _ in iter(handle.readline, b""))
        if count > max_errors:
            return DataError(line_pipeline.too_many_bad_lines(count, max_errors, plan.errors))
    pipeline_paths.remove_written(plan, args.overwrite)
    if args.runner == "direct" and runner_options.lost_worker(error):
        left = ("Its dead-letter file was removed, and --overwrite writes every output again." if args.overwrite
                else "No file of this run was kept.")
        return T2TError(runner_options.lost_worker_message(error, left))
    return error


def translate_command(args, path, open_options, request, extra=()):
    """`t2t-keras translate --runner`: prints where the translations and the bad lines went."""
    clashing = [flag for flag, name in PLAIN_ONLY if getattr(args, name, None)]
    if clashing:
        raise T2TError(f"translate --runner writes plain translations: leave out {', '.join(clashing)} (the "
                       "single-process road, without --runner, takes them).")
    handler = ArtifactHandler(path, open_options, request, "generate",
                              threads=runner_options.worker_threads(args.runner, args.workers))
    return _report(run_lines(args, path, handler, "sentence", extra), "translated")


def score_command(args, path, open_options, extra=()):
    """`t2t-keras score --runner`: the score of each SOURCE<TAB>TARGET line of --input, one file per input."""
    if args.source is not None or args.target is not None:
        raise T2TError("score --runner reads SOURCE<TAB>TARGET lines from --input GLOB; --source and --target "
                       "are the single-process road.")
    handler = ArtifactHandler(path, open_options, None, "score",
                              score_format=(args.token_level, args.json), batch_tokens=args.batch_tokens,
                              threads=runner_options.worker_threads(args.runner, args.workers))
    return _report(run_lines(args, path, handler, "pair", extra), "scored")


def _report(plan, done):
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(plan.errors) as handle:
        bad = sum(1 for _ in iter(handle.readline, b""))
    where = plan.directory or plan.outputs[0]
    print(f"{done} {len(plan.inputs)} file(s) into {where}; {bad} bad line(s) listed in {plan.errors}")
    return 0
