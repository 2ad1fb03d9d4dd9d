"""Ensembles against their members: test BLEU, chrF and speed of each run alone and of their ensembles.

An ensemble is what `translate` / `evaluate` decode with `--run-dir` repeated: the first two, three, ... runs.

    python bench/bench_ensemble.py --runs 3 --minutes 20 --work-dir runs/ensemble --output bench/results/ensemble.md
    python bench/bench_ensemble.py --run-dir runs/a --run-dir runs/b --run-dir runs/c     # runs trained already
    python bench/bench_ensemble.py --config tiny --runs 2 --minutes 0.2 --set data.source=text ...   # a smoke run

Without `--run-dir`, the script trains `--runs` new runs of the same config (`--config` plus `--set`, by default
`mini` on the default corpus) in `--work-dir/seed-<seed>`, for `--minutes` each, changing only `training.seed`
(`--seed`, `--seed + 1`, ...): independently initialised models that see the training batches in other orders.
An ensemble needs one vocabulary, so the first run learns it and the others are trained with a copy of its
tokenizer file (a run uses the tokenizer it finds in its directory). Each training waits for a quiet machine and
records how many cores other processes used meanwhile. With `--average`, each run's last
`training.average_last` checkpoints are averaged first (§6.1), as the main job does.

Then every run alone and every ensemble of the first k runs (k = 2 ... N) translates the `--split` (test) with
the first run's decoding settings (or `--beam-size`), the weights `--model` names (auto: the average when it
is fresh), and is scored with sacreBLEU and chrF. Speed is sentences per second over the whole split: one
untimed pass first (XLA compiles once per batch shape), then the median of `--repeats` passes on a quiet
machine. The markdown table (for docs/results.md) is printed and written to `--output`.
"""

import argparse
import os
import pathlib
import shlex
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from timing import (  # noqa: E402
    add_arguments,
    busy_cores_seconds,
    measure_quietly,
    publish,
    table_report,
    wait_for_quiet,  # noqa: E402
)

from t2t_keras.artifacts import open_artifact  # noqa: E402
from t2t_keras.config import MODEL_SOURCES, load_config, replace  # noqa: E402
from t2t_keras.evaluation.bleu import score  # noqa: E402
from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: E402
from t2t_keras.resolved_run import resolve_run  # noqa: E402
from t2t_keras.runs import RunDirectory, average_run  # noqa: E402
from t2t_keras.training.trainer import train  # noqa: E402

HEADER = ("| models | runs | BLEU | chrF | sentences/s | speed vs. one run | other cores |\n"
          "|---|---|---:|---:|---:|---:|---:|")


def train_runs(config, work, args):
    """`args.runs` new runs of `config`, seeds `args.seed`, `args.seed + 1`, ..., sharing the first one's
    tokenizer; returns their `RunDirectory`s and, per run, `(steps, other cores)` of its training."""
    runs, trainings = [], []
    for index in range(args.runs):
        seed = args.seed + index
        run = RunDirectory(work / f"seed-{seed}")
        if runs:  # the vocabulary of the first run, so that the models can decode together
            kind = config.data.tokenizer
            run.path.mkdir(parents=True)
            shutil.copy(runs[0].tokenizer_file(kind), run.tokenizer_file(kind))
        wait_for_quiet(max_wait=args.quiet_wait)
        machine, own, wall = busy_cores_seconds(), time.process_time(), time.monotonic()
        result = train(resolve_run(run.path, replace(config, training={"seed": seed})), minutes=args.minutes,
                       verbose=args.verbose)
        wall = time.monotonic() - wall
        other = max(0.0, (busy_cores_seconds() - machine) - (time.process_time() - own)) / wall
        trainings.append((result.final_step, other))
        if args.average:
            average_run(run)
        runs.append(run)
    return runs, trainings


def measure(runs, args):
    """BLEU, chrF and sentences per second of `runs[0]` with `runs[1:]` as its ensemble."""
    first = runs[0]
    pairs = load_eval_pairs(first, args.split)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    artifact = open_artifact(first, model=args.model, ensemble=runs[1:])
    request = artifact.request(beam_size=args.beam_size)  # the first run's decoding config; None keeps its beam
    timed = measure_quietly(lambda: artifact.generate(sources, request).best, args.repeats, args.quiet_wait,
                            args.max_other, args.retries)
    scores = score(timed["value"], references, target_lang=first.load_config().data.target_lang)
    return dict(models=len(runs), runs=", ".join(run.path.name for run in runs), bleu=scores["bleu"],
                chrf=scores["chrf"], speed=len(sources) / timed["median_s"], other_cores=timed["other_cores"],
                sentences=len(sources), signature=scores["signature"], beam_size=request.beam_size,
                alpha=request.alpha)


def row(result, single_speed):
    return (f"| {result['models']} | {result['runs']} | {result['bleu']:.2f} | {result['chrf']:.2f} "
            f"| {result['speed']:.1f} | {result['speed'] / single_speed:.2f}× | {result['other_cores']:.2f} |")


def report(rows, trainings, args):
    singles = [r for r in rows if r["models"] == 1]
    single_speed = sum(r["speed"] for r in singles) / len(singles)
    first = rows[0]
    overrides = "".join(f" --set {shlex.quote(text)}" for text in args.set)
    trained = ("" if not trainings else f"Each run trained {args.minutes} minutes (`--config {args.config}"
               f"{overrides}`), seeds {args.seed} to {args.seed + len(trainings) - 1}: steps "
               f"{', '.join(str(steps) for steps, _ in trainings)}; other processes used "
               f"{', '.join(f'{other:.2f}' for _, other in trainings)} cores meanwhile. ")
    return table_report(
        "## Ensembles against their members (`python bench/bench_ensemble.py`)",
        f"{trained}The {args.split} split ({first['sentences']} sentences) translated with beam "
        f"{first['beam_size']}, alpha {first['alpha']}, `--model {args.model}` weights; sacreBLEU "
        f"`{first['signature']}`. An ensemble averages its models' log-probabilities at each step. Speed: "
        f"the median of {args.repeats} passes after an untimed one; \"speed vs. one run\" against the mean of "
        "the single runs. \"other cores\": cores other processes used while timing (should be near 0).",
        HEADER, [row(r, single_speed) for r in rows], f"TensorFlow {tf.__version__}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", dest="run_dirs", action="append", default=[],
                        help="an existing translation run (repeat; all of one vocabulary) instead of training")
    parser.add_argument("--config", default="mini", help="preset or YAML file of the runs to train")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="config override")
    parser.add_argument("--runs", type=int, default=3, help="how many runs to train (ensembles of 2 ... N)")
    parser.add_argument("--minutes", type=float, default=20.0, help="training minutes for each run")
    parser.add_argument("--seed", type=int, default=1, help="training.seed of the first run; the others count on")
    parser.add_argument("--average", action="store_true", help="average each trained run's last checkpoints")
    parser.add_argument("--work-dir", help="where new runs go (default: a temporary directory)")
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--model", default="auto", choices=MODEL_SOURCES, help="which weights of each run")
    parser.add_argument("--beam-size", type=int, help="beam size (default: the first run's decoding.beam_size)")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes over the split")
    parser.add_argument("--output", help="also write the markdown report here")
    parser.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity")
    add_arguments(parser)
    args = parser.parse_args()
    if len(args.run_dirs) == 1 or (not args.run_dirs and args.runs < 2):
        parser.error("an ensemble has two runs or more: give --run-dir twice or more, or --runs 2 or more.")

    with tempfile.TemporaryDirectory() as tmp:
        if args.run_dirs:
            runs, trainings = [RunDirectory(path) for path in args.run_dirs], []
        else:
            work = pathlib.Path(args.work_dir or tmp)
            if work.exists() and any(work.glob("seed-*")):
                parser.error(f"{work} already holds runs: choose another --work-dir, or pass them as --run-dir.")
            runs, trainings = train_runs(load_config(args.config, args.set), work, args)
        rows = [measure([run], args) for run in runs]
        rows += [measure(runs[:count], args) for count in range(2, len(runs) + 1)]
    publish(report(rows, trainings, args), args.output)


if __name__ == "__main__":
    main()
