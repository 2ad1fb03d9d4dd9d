"""`--runner`, `--workers` and the other flags of a pipeline command as Beam's `PipelineOptions`.

Any flag the command itself does not know (`--project`, `--region`, `--temp_location`, `--flink_master`,
`--spark_master_url`, `--requirements_file`, `--sdk_container_image`, ...) is handed to Beam as it was given.

A worker process of the local runner that stops mid-bundle (killed, out of memory) fails the whole pipeline: Beam's
local runner (the FnApiRunner under `DirectRunner`) reads each bundle's results from the worker's data channel, and
when that channel closes it raises "Channel closed prematurely." instead of giving the bundle to another worker.
`lost_worker` recognizes that failure, so that a command can say what happened and how to go on.
"""

import os

from t2t_keras.errors import T2TError

RUNNERS = {"direct": "DirectRunner", "dataflow": "DataflowRunner", "flink": "FlinkRunner",
           "spark": "SparkRunner"}
# --workers N as each runner's own flag (the local runner: N worker processes).
WORKER_FLAGS = {"dataflow": "--num_workers", "flink": "--parallelism", "spark": "--parallelism"}
# What Beam's local runner raises when a worker process it started stops: its data channel closed mid-bundle, or
# the worker's exit status (`local_job_service.SubprocessSdkWorker`).
LOST_WORKER_SIGNS = ("Channel closed prematurely", "Worker subprocess exited")


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


def worker_threads(runner, workers=None):
    """The cores each worker process's model decodes on: a share of this machine's for the local runner's worker
    processes (`Decisions.worker_threads`), else None (a cluster's worker has its machine)."""
    if runner != "direct" or (workers or 1) < 2:
        return None
    from t2t_keras.switches.decisions import Decisions

    return Decisions.before_tensorflow().worker_threads(workers)


def pipeline_options(runner, workers=None, extra=()):
    """The `PipelineOptions` of `pipeline_flags`. The local runner's worker processes start TensorFlow without its
    C++ start-up lines, as the command itself does (a TF_CPP_MIN_LOG_LEVEL of the user's own is kept)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return PipelineOptions(pipeline_flags(runner, workers, extra))


def lost_worker(error):
    """Whether `error`, or an error it was raised from, is the runner's report of a worker process that stopped."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if type(error).__module__.startswith("grpc") or any(sign in str(error) for sign in LOST_WORKER_SIGNS):
            return True
        error = error.__cause__ or error.__context__
    return False


def lost_worker_message(error, left):
    """The one-line message of a local pipeline failed by a stopped worker process; `left`: what it left behind."""
    said = str(error).strip()[:200] or type(error).__name__
    return (f"A worker process of the pipeline stopped mid-run (Beam: {said}; killed, or out of memory: see the log "
            "above), and Beam's local runner does not give its work to another worker, so the pipeline failed. "
            f"{left} Run the same command again; if a worker stops again, give fewer --workers (each holds a model "
            "of its own).")
