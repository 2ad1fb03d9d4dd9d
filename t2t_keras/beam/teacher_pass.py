"""`distill --runner`: the teacher's translations of each shard of its training sources by the line pipeline.

Each shard `distilled.distil_shards` asks for is written to a directory under the student run, translated by a
pipeline on the runner given (the teacher run opened as an artifact, with the weights, search and precision of
`teacher.teacher_settings`), and read back in order. The directory lies in the student run, so on a cluster it
is on the file system the run is on.
"""

import shutil
import types

from t2t_keras.beam import line_pipeline, pipeline_paths, runner_options
from t2t_keras.beam.artifact_handler import ArtifactHandler
from t2t_keras.errors import DataError, T2TError
from t2t_keras.runs import RunDirectory

WORK_DIRECTORY = ".teacher-pipeline"  # under RUN/distilled/ while a shard is translated
SEARCH_FIELDS = ("beam_size", "alpha", "length_penalty", "max_extra_length", "stopping")
KEPT = "The shards the teacher finished are kept, and distill goes on from the first one not done."


def pipeline_translate(teacher, settings, student_dir, runner, workers=None, extra=()):
    """The teacher's `translate(lines) -> translations` through a pipeline on `runner`."""
    import apache_beam as beam

    request = {name: settings[name] for name in SEARCH_FIELDS}
    open_options = dict(model=teacher.weights.source, precision=settings["precision"])
    threads = runner_options.worker_threads(runner, workers)
    handler = ArtifactHandler(str(teacher.run.path), open_options, request, "generate", threads=threads)
    retry = ArtifactHandler(str(teacher.run.path), open_options, request, "generate", max_batch_size=1,
                           threads=threads)
    work = RunDirectory(student_dir).distilled_dir / WORK_DIRECTORY
    options = runner_options.pipeline_options(runner, workers, extra)

    def translate(lines):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        source, output = work / "source.txt", work / "translations.txt"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        plan = pipeline_paths.Plan((str(source),), (str(output),), str(output) + pipeline_paths.ERRORS_SUFFIX, "")
        try:
            with beam.Pipeline(options=options) as pipeline:
                line_pipeline.build_line_pipeline(pipeline, plan, handler, retry)
        except Exception as error:
            if runner == "direct" and runner_options.lost_worker(error):
                raise T2TError(runner_options.lost_worker_message(error, KEPT)) from error
            raise
        translations = output.read_text(encoding="utf-8").splitlines()
        if len(translations) != len(lines):
            raise DataError(f"The teacher's pipeline wrote {len(translations)} lines for {len(lines)}: see "
                            f"{plan.errors}.")
        shutil.rmtree(work)
        return translations

    return translate


def runner_choice(runner, workers=None, extra=()):
    """What `distill` passes on: None without --runner."""
    return types.SimpleNamespace(runner=runner, workers=workers, extra=list(extra)) if runner else None
