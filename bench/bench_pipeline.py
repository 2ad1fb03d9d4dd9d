"""translate and prepare as Apache Beam pipelines (`--runner direct`) against the single-process commands.

    python bench/bench_pipeline.py --ctranslate2 runs/main/exports/ct2 --lines 100000 \
        --out bench/results/pipeline --summary bench/results/summary.json
    python bench/bench_pipeline.py --ctranslate2 DIR --input FILE --lines 200 --out /tmp/pipeline-check  # works?

Each measurement is one command line in a process of its own (`t2t-keras ...`, as a user runs it), so its peak
RSS is its own: "peak RSS" is the largest resident set of that process and the worker processes it started.

- **translate**: the first `--lines` lines of `--input` (repeated when the file is shorter; default: the default
  corpus' English training side) translated by `--ctranslate2 DIR` (or `--run-dir`): single-process
  `translate`, then `translate --runner direct --workers N` for each N of `--workers`: wall seconds, lines/s,
  peak RSS, and whether the pipeline's output equals the single process's line for line.
- **prepare** (with `--prepare-pairs N`): the first N pairs of `--corpus SRC TGT` (default: the default corpus'
  training files, repeated with a line number to stay distinct) prepared with the `mini` preset by `prepare` and
  by `prepare --runner direct --workers 2`: wall seconds, peak RSS.

`summary.json` keys (with `--summary`): `pipeline_translate_vs_single` (lines/s at 2 workers over the single
process's), and `pipeline_prepare_s` (with the pair count in `pipeline_prepare_pairs`).
"""

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

PEAK_RSS = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(done.returncode)")


def timed(command, stdout=None):
    """`(seconds, peak RSS in MiB)` of `command` run in a process of its own."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *map(str, command)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed:\n{done.stderr[-3000:]}")
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 1024


def t2t_keras(*args):
    return [sys.executable, "-m", "t2t_keras", *args]


def default_corpus():
    """The default corpus' training files, [English, German] (`t2t-keras train` fetches them once)."""
    found = sorted(pathlib.Path.home().glob(".cache/t2t_keras/corpora/*/train.en"))
    if not found:
        raise SystemExit("No default corpus in ~/.cache/t2t_keras/corpora/: give --input (and --corpus).")
    return [found[0], found[0].with_suffix(".de")]


def first_lines(path, count, numbered=False):
    """The first `count` lines of `path`, the file repeated as often as needed (numbered: kept distinct)."""
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    taken = [lines[i % len(lines)] for i in range(count)]
    return [f"{line} {i}" if numbered and i >= len(lines) else line for i, line in enumerate(taken)]


def bench_translate(args, work):
    source = work / "input.txt"
    source.write_text("\n".join(first_lines(args.input or default_corpus()[0], args.lines)) + "\n",
                      encoding="utf-8")
    artifact = ["--ctranslate2", args.ctranslate2] if args.ctranslate2 else ["--run-dir", args.run_dir]
    single_out = work / "single.txt"
    with open(single_out, "w", encoding="utf-8") as handle:
        seconds, rss = timed(t2t_keras("translate", *artifact, "--input", source), stdout=handle)
    rows = [dict(road="single process", workers=1, seconds=seconds, lines_per_s=args.lines / seconds, rss_mib=rss,
                 same=True)]
    for workers in args.workers:
        output = work / f"pipeline-{workers}.txt"
        seconds, rss = timed(t2t_keras("translate", *artifact, "--input", source, "--output", output,
                                       "--runner", "direct", "--workers", workers))
        same = output.read_text(encoding="utf-8") == single_out.read_text(encoding="utf-8")
        rows.append(dict(road="--runner direct", workers=workers, seconds=seconds,
                         lines_per_s=args.lines / seconds, rss_mib=rss, same=same))
    return rows


def bench_prepare(args, work):
    corpus = args.corpus or default_corpus()
    files = []
    for side, path in zip(("en", "de"), corpus):
        files.append(work / f"train.{side}")
        files[-1].write_text("\n".join(first_lines(path, args.prepare_pairs, numbered=True)) + "\n",
                             encoding="utf-8")
    settings = ["--config", "mini", "--set", "data.source=text", "--set",
                f"data.train_files={[str(path) for path in files]!r}", "--set", "data.dev_files=null",
                *[item for value in args.set for item in ("--set", value)]]
    rows = []
    for road, extra in (("prepare", []), ("prepare --runner direct", ["--runner", "direct", "--workers", "2"])):
        seconds, rss = timed(t2t_keras("prepare", "--run-dir", work / road.replace(" ", "_"), *settings, *extra))
        rows.append(dict(road=road, pairs=args.prepare_pairs, seconds=seconds, rss_mib=rss))
    return rows


def table(rows):
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(f"{value:.2f}" if isinstance(value, float) else str(value)
                                       for value in row.values()) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--ctranslate2", help="the CTranslate2 export that translates")
    where.add_argument("--run-dir", help="or the run directory that translates")
    parser.add_argument("--input", help="the lines to translate (default: the default corpus' train.en)")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prepare-pairs", type=int, help="also time prepare against prepare --runner on N pairs")
    parser.add_argument("--corpus", nargs=2, metavar=("SRC", "TGT"), help="the pairs prepared")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="prepare: an override of the mini preset (e.g. data.vocab_size=1000 for a small corpus)")
    parser.add_argument("--out", required=True, help="directory of pipeline.json and pipeline.md")
    parser.add_argument("--summary", help="summary.json to update with the summary keys")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        results = dict(translate=bench_translate(args, work), lines=args.lines)
        if args.prepare_pairs:
            results["prepare"] = bench_prepare(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / "pipeline.json").write_text(json.dumps(results, indent=1) + "\n")
    text = "\n\n".join(table(rows) for rows in (results["translate"], results.get("prepare")) if rows)
    (out / "pipeline.md").write_text(text + "\n")
    print(text)
    if args.summary:
        update_summary(pathlib.Path(args.summary), results)


def update_summary(path, results):
    summary = json.loads(path.read_text()) if path.exists() else {}
    by_workers = {row["workers"]: row for row in results["translate"] if row["road"] != "single process"}
    if 2 in by_workers:
        summary["pipeline_translate_vs_single"] = round(by_workers[2]["lines_per_s"] /
                                                        results["translate"][0]["lines_per_s"], 3)
    for row in results.get("prepare", []):
        if row["road"] != "prepare":
            summary["pipeline_prepare_s"], summary["pipeline_prepare_pairs"] = round(row["seconds"], 1), row["pairs"]
    path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
