"""A SavedModel's searches in graph mode, with XLA for small batches, and with XLA everywhere: first pass and warm.

    PYTHONPATH=$PWD python bench/bench_export_search.py --run-dir runs/main --work-dir runs/export-search-bench \\
        [--b1-sentences 100] [--passes 3] [--json bench/results/export_search.json] \\
        [--output bench/results/export_search.md]

The run is exported three times (`t2t-keras export --quantization float32 --jit-compile false|auto|true`). Each
export is measured in a fresh process of its own (`--measure`; `switches.kernels` decides oneDNN as
`t2t-keras translate --saved-model` does), with beam 4 and greedy (the run's alpha and max_extra_length): at batch 1,
the first `--b1-sentences` test sentences one call each, and at batch 32, the whole test split in order of source
length, each `--passes` times over. The first pass pays for preparing every search and, with XLA, compiling each
new shape (rows, source width, output bound); the later passes show the speed once every shape has been seen, as a
long-running server would. The peak RSS is that of the process after every pass of both methods. 2 threads.
"""

import argparse
import datetime
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

MODES = ("false", "auto", "true")
METHODS = (("beam4", 4), ("greedy", 1))


def measure_export(args):
    """Prints one JSON object: sentences/s per method, batch size and pass, and the peak RSS."""
    from t2t_keras.switches.kernels import choose_onednn  # noqa: PLC0415
    from t2t_keras.switches.threads import choose_intra_op_threads  # noqa: PLC0415

    choose_onednn(args.measure)  # as `t2t-keras translate --saved-model` does, before TensorFlow loads
    choose_intra_op_threads(args.measure)
    from t2t_keras.artifacts.saved_model import SavedModelArtifact  # noqa: PLC0415

    artifact = SavedModelArtifact(args.measure, batch_size=32)
    sources = pathlib.Path(args.sources).read_text(encoding="utf-8").splitlines()
    by_length = sorted(sources, key=len)
    result = {}
    for method, beam in METHODS:
        request = artifact.request(beam_size=beam)
        for batch, sentences in (("b1", sources[:args.b1_sentences]), ("b32", by_length)):
            rates = []
            for _ in range(args.passes):
                began = time.perf_counter()
                if batch == "b1":
                    for sentence in sentences:
                        artifact.generate([sentence], request)
                else:
                    artifact.generate(sentences, request)
                rates.append(round(len(sentences) / (time.perf_counter() - began), 1))
            result[f"{method}_{batch}_sentences_s"] = rates
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(result), flush=True)


def export_and_measure(args, work, sources):
    results = {}
    for mode in MODES:
        out = work / f"jit-{mode}"
        if not out.exists():
            subprocess.run([sys.executable, "-m", "t2t_keras", "export", "--run-dir", args.run_dir, "--out", str(out),
                            "--quantization", "float32", "--jit-compile", mode], check=True)
        print(f"measuring --jit-compile {mode}", flush=True)
        command = [sys.executable, __file__, "--measure", str(out), "--sources", sources,
                   "--b1-sentences", str(args.b1_sentences), "--passes", str(args.passes)]
        out_text = subprocess.run(command, check=True, text=True, stdout=subprocess.PIPE).stdout
        results[mode] = json.loads(out_text.strip().splitlines()[-1])
    return results


def test_sources(run, work):
    from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: PLC0415

    path = work / "test.src"
    if not path.exists():
        work.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(s + "\n" for s, _ in load_eval_pairs(run, "test")), encoding="utf-8")
    return str(path)


def report(results, args, sentences):
    lines = ["## A SavedModel's searches: graph mode, XLA for small batches, XLA everywhere "
             "(`bench/bench_export_search.py`)", "",
             f"`--jit-compile` of the export; sentences/s per pass (first, then warm), batch 1 over the first "
             f"{args.b1_sentences} test sentences, batch 32 over all {sentences} in order of source length; "
             "2 threads; peak RSS after every pass.", "",
             "| --jit-compile | beam 4 b1 | beam 4 b32 | greedy b1 | greedy b32 | peak RSS MB |",
             "|---|---|---|---|---|---:|"]
    for mode, r in results.items():
        cells = [" / ".join(f"{x:g}" for x in r[f"{m}_{b}_sentences_s"]) for m in ("beam4", "greedy")
                 for b in ("b1", "b32")]
        lines.append(f"| {mode} | " + " | ".join(cells) + f" | {r['peak_rss_mb']:,} |")
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "?")
    versions = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
                              capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines += ["", f"Run `{args.run_dir}`. {cpu}, {os.cpu_count()} cores; TensorFlow {versions}; commit {commit}; "
              f"{datetime.date.today()}.", ""]
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", help="a trained translation run")
    parser.add_argument("--work-dir", default="runs/export-search-bench")
    parser.add_argument("--b1-sentences", type=int, default=100)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--output")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--sources", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.measure:
        return measure_export(args)
    work = pathlib.Path(args.work_dir)
    sources = test_sources(args.run_dir, work)
    results = export_and_measure(args, work, sources)
    text = report(results, args, len(pathlib.Path(sources).read_text(encoding="utf-8").splitlines()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.output:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    return None


if __name__ == "__main__":
    main()
