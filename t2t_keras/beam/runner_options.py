"""`--runner`, `--workers` and the other flags of a pipeline command as Beam's `PipelineOptions`.

Any flag the command itself does not know (`--project`, `--region`, `--temp_location`, `--flink_master`,
`--spark_master_url`, `--requirements_file`, `--sdk_container_image`, ...) is handed to Beam as it was given.
"""

import os

from t2t_keras.errors import T2TError

RUNNERS = {"direct": "DirectRunner", "dataflow": "DataflowRunner", "flink": "FlinkRunner",
           "spark": "SparkRunner"}
# --workers N as each runner's own flag (the local runner: N worker processes).
WORKER_FLAGS = {"dataflow": "--num_workers", "flink": "--parallelism", "spark": "--parallelism"}


def pipeline_flags(runner, workers=None, extra=()):
    """Beam's flags for `--runner runner --workers workers` and the `extra` flags given."""
    if runner not in RUNNERS:
        raise T2TError(f"--runner {runner} is not one of {', '.join(RUNNERS)}.")
    if workers is not None and workers < 1:
        raise T2TError(f"--workers {workers}: give at least 1.")
    flags = [f"--runner={RUNNERS[runner]}"]
    if runner == "direct":
        count = workers or 1
        mode = "multi_processing" if count > 1 else "in_memory"
        flags += [f"--direct_num_workers={count}", f"--direct_running_mode={mode}"]
    elif workers is not None:
        flags.append(f"{WORKER_FLAGS[runner]}={workers}")
    return flags + list(extra)


def pipeline_options(runner, workers=None, extra=()):
    """The `PipelineOptions` of `pipeline_flags`. The local runner's worker processes start TensorFlow without its
    C++ start-up lines, as the command itself does (a TF_CPP_MIN_LOG_LEVEL of the user's own is kept)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return PipelineOptions(pipeline_flags(runner, workers, extra))
