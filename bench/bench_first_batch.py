"""Seconds to a run's first training batch on each road of `data.pipeline`, for a fresh run and a restart.

    python bench/bench_first_batch.py                      # the default corpus' training files (32,023 pairs)
    python bench/bench_first_batch.py --source a.en --target a.de

Each road starts twice in a run directory of its own, each start in a fresh process (TensorFlow's start-up
not counted): the first start trains the vocabulary (and, prepared, writes the shards), the second finds them.
Timed from `Task.load_data` to the first batch of `RunData.training_batches(0)` (no dev split), then batches/s
over the next `--batches` batches. This is what `PREPARE_THRESHOLD_BYTES` (tasks/data_route.py) is about.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CORPUS = pathlib.Path.home() / ".cache" / "t2t_keras" / "corpora" / "libreoffice-help-en-de"
SETTINGS = ["data.source=text", "data.vocab_size=8000", "model.vocab_size=8000", "data.batch_tokens=4096",
            "data.max_length=128"]


def one_start(pipeline, run_dir, source, target, batches):
    """One start of `pipeline` in `run_dir`: seconds to load, to the first batch, and batches/s after it."""
    from t2t_keras.config import load_config
    from t2t_keras.runs import RunDirectory
    from t2t_keras.tasks import task_of

    config = load_config("mini", SETTINGS + [f"data.train_files=[{source}, {target}]", f"data.pipeline={pipeline}"])
    run = RunDirectory(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    data = task_of(config).load_data(run, config)
    loaded = time.perf_counter()
    next(iter(data.training_batches(0)))
    first = time.perf_counter()
    count = sum(1 for _ in data.training_batches(1).take(batches))
    return dict(pipeline=pipeline, load_s=round(loaded - began, 2), first_batch_s=round(first - began, 2),
                batches_per_s=round(count / (time.perf_counter() - first), 1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(CORPUS / "train.en"))
    parser.add_argument("--target", default=str(CORPUS / "train.de"))
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--child", nargs=2, metavar=("PIPELINE", "RUN_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one_start(*args.child, args.source, args.target, args.batches)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for pipeline in ("memory", "prepared"):
            for start in ("fresh", "restart"):
                command = [sys.executable, __file__, "--child", pipeline, f"{tmp}/{pipeline}", "--source",
                           args.source, "--target", args.target, "--batches", str(args.batches)]
                result = json.loads(subprocess.run(command, check=True, capture_output=True,
                                                   text=True).stdout.splitlines()[-1])
                print(json.dumps(dict(result, start=start)))


if __name__ == "__main__":
    main()
