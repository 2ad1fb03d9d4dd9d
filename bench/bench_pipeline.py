"""translate and prepare as Apache Beam pipelines (`--runner direct`) against the single-process commands.

    python bench/bench_pipeline.py --ctranslate2 runs/main/exports/ct2 --lines 100000 --prepare-pairs 4500000
    python bench/bench_pipeline.py ... --update-summary          # also the summary.json keys below
    python bench/bench_pipeline.py --ctranslate2 DIR --lines 2000 --prepare-pairs 20000 --out /tmp/check  # works?

Each measurement is one command line in a process of its own (`t2t-keras ...`, as a user runs it). Its process
tree is sampled every `--sample-s` seconds (psutil) for the peak resident set of each process: the command's own
(`command_rss_mib`), the largest of the local runner's worker processes (`worker_rss_mib`, with `workers_seen`),
and the peak of the tree's sum (`total_rss_mib`); `largest_rss_mib` is the kernel's high-water mark of the
largest single process of the tree (`wait4`), which no sample can miss. `other_cores`: the cores other processes
used meanwhile (the machine's busy time less the command tree's CPU time, over the wall time).

- **translate**: the first `--lines` lines of `--input` (repeated when the file is shorter; default: the default
  corpus' English training side) translated by `--ctranslate2 DIR` (or `--run-dir`): single-process `translate`,
  then `translate --runner direct --workers N` for each N of `--workers` (1: the command's own process; more:
  worker processes): wall seconds, lines/s, peak RSS, and how many lines of the pipeline's output differ from
  the single process's (a CTranslate2 beam search can differ where an output runs to its length limit: docs/scale.md).
- **prepare** (with `--prepare-pairs N`): the corpus of the scale benchmark (`bench_data_scale.write_corpus`:
  each line two random pairs of the default corpus joined, N lines; 4,500,000 is its WMT-sized run) prepared with
  its settings (the `mini` preset, 4,000-piece BPE, max_length 128) by `prepare` and by `prepare --runner direct
  --workers 2` (`--prepare-workers`): wall seconds, pairs/s, peak RSS, and the kept-pair counts of both.

Writes `OUT/pipeline.json` and `OUT/pipeline.md` (`--out`, default bench/results). With `--update-summary`,
`summary.json` gets `pipeline_translate_vs_single` (lines/s at 2 workers over the single process's) and, at
4,500,000 pairs, `pipeline_prepare_4m5_s` (the pipeline's wall seconds).
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from bench_data_scale import MAX_LENGTH, _machine, write_corpus
from timing import busy_cores_seconds

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
WORKER_MARK = "apache_beam.runners.worker.sdk_worker_main"  # `python -m` of a local runner's worker process
MIB = 1024 * 1024
SUMMARY_PAIRS = 4_500_000  # the pair count of `pipeline_prepare_4m5_s`


class TreeSampler:
    """Samples the resident set of a process and its descendants every `interval` seconds in a thread."""

    def __init__(self, pid, interval):
        self.root, self.interval = psutil.Process(pid), interval
        self.peaks, self.workers, self.total = {}, set(), 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped.wait(self.interval):
            self.sample()

    def sample(self):
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        total = 0
        for process in tree:
            try:
                rss = process.memory_info().rss
                if process.pid not in self.workers and _is_worker(process.cmdline()):
                    self.workers.add(process.pid)
            except psutil.Error:
                continue
            self.peaks[process.pid] = max(self.peaks.get(process.pid, 0), rss)
            total += rss
        self.total = max(self.total, total)

    def stop(self):
        self.stopped.set()
        self.thread.join()
        workers = [self.peaks[pid] for pid in self.workers if pid in self.peaks]
        return dict(command_rss_mib=self.peaks.get(self.root.pid, 0) / MIB,
                    worker_rss_mib=max(workers, default=0) / MIB, workers_seen=len(workers),
                    total_rss_mib=self.total / MIB)


def _is_worker(command_line):
    """A worker's Python process, not the shell that starts it (`sh -c "python -m ..."`)."""
    return len(command_line) > 2 and command_line[1:3] == ["-m", WORKER_MARK]


def timed(command, stdout=None, sample_s=0.25):
    """Wall seconds, peak RSS (`TreeSampler`, `largest_rss_mib`) and `other_cores` of `command` run in a process
    of its own."""
    machine, began = busy_cores_seconds(), time.monotonic()
    process = subprocess.Popen([str(part) for part in command], stdout=stdout, stderr=subprocess.PIPE)
    sampler, logged = TreeSampler(process.pid, sample_s), []
    reader = threading.Thread(target=lambda: logged.append(process.stderr.read()), daemon=True)
    reader.start()  # the local runner logs much: a full pipe would stop the command
    _, status, usage = os.wait4(process.pid, 0)  # the usage of this child and its descendants
    seconds = time.monotonic() - began
    process.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    peaks = sampler.stop()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed:\n{logged[0].decode(errors='replace')[-3000:]}")
    other = max(0.0, busy_cores_seconds() - machine - usage.ru_utime - usage.ru_stime) / seconds
    return dict(seconds=seconds, **peaks, largest_rss_mib=usage.ru_maxrss / 1024, other_cores=other)


def t2t_keras(*args):
    return [sys.executable, "-m", "t2t_keras", *args]


def default_corpus():
    """The default corpus' training files, [English, German] (`t2t-keras train` fetches them once)."""
    found = sorted(pathlib.Path.home().glob(".cache/t2t_keras/corpora/*/train.en"))
    if not found:
        raise SystemExit("No default corpus in ~/.cache/t2t_keras/corpora/: give --input.")
    return [found[0], found[0].with_suffix(".de")]


def first_lines(path, count):
    """The first `count` lines of `path`, the file repeated as often as needed."""
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    return [lines[i % len(lines)] for i in range(count)]


def bench_translate(args, work):
    source = work / "input.txt"
    source.write_text("\n".join(first_lines(args.input or default_corpus()[0], args.lines)) + "\n",
                      encoding="utf-8")
    artifact = ["--ctranslate2", args.ctranslate2] if args.ctranslate2 else ["--run-dir", args.run_dir]
    single_out = work / "single.txt"
    with open(single_out, "w", encoding="utf-8") as handle:
        measured = timed(t2t_keras("translate", *artifact, "--input", source), handle, args.sample_s)
    rows = [dict(road="single process", workers=1, lines_per_s=args.lines / measured["seconds"], **measured,
                 lines_differing=0)]
    single = single_out.read_text(encoding="utf-8").splitlines()
    for workers in args.workers:
        output = work / f"pipeline-{workers}.txt"
        measured = timed(t2t_keras("translate", *artifact, "--input", source, "--output", output,
                                   "--runner", "direct", "--workers", workers), sample_s=args.sample_s)
        piped = output.read_text(encoding="utf-8").splitlines()
        differing = sum(a != b for a, b in zip(piped, single)) + abs(len(piped) - len(single))
        rows.append(dict(road="--runner direct", workers=workers, lines_per_s=args.lines / measured["seconds"],
                         **measured, lines_differing=differing))
        output.unlink()
    return rows


def bench_prepare(args, work):
    """`prepare` against `prepare --runner direct` on the scale benchmark's corpus of `--prepare-pairs` lines."""
    corpus = work / "corpus"
    origin = write_corpus(corpus, args.prepare_pairs)
    files = [str(corpus / "train.en"), str(corpus / "train.de")]
    settings = ["--config", "mini", "--set", "data.source=text", "--set", f"data.train_files={files!r}",
                "--set", "data.dev_files=null", "--set", f"data.max_length={MAX_LENGTH}", "--set",
                "data.pipeline=prepared", *[item for value in args.set for item in ("--set", value)]]
    rows = []
    pipeline = ["--runner", "direct", "--workers", str(args.prepare_workers)]
    for road, extra in (("prepare", []), ("prepare --runner direct", pipeline)):
        run_dir = work / road.replace(" ", "_")
        measured = timed(t2t_keras("prepare", "--run-dir", run_dir, *settings, *extra), sample_s=args.sample_s)
        manifest = json.loads((run_dir / "prepared" / "manifest.json").read_text())
        rows.append(dict(road=road, workers=args.prepare_workers if extra else 1, pairs=args.prepare_pairs,
                         pairs_per_s=args.prepare_pairs / measured["seconds"], **measured,
                         kept=manifest["pairs"]["kept"], shards=len(manifest["shards"])))
        shutil.rmtree(run_dir)
    return rows, origin


def table(rows):
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(f"{value:,.2f}" if isinstance(value, float) else str(value)
                                       for value in row.values()) + " |")
    return "\n".join(lines)


def report(results):
    head = (f"{results['machine']}; {results['date']}. translate: {results['lines']:,} lines of {results['input']} "
            f"by {results['artifact']}.")
    parts = [head, table(results["translate"])]
    if results.get("prepare"):
        parts += [f"prepare: {results['prepare_pairs']:,} pairs, {results['corpus']}.", table(results["prepare"])]
    return "\n\n".join(parts) + "\n"


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--ctranslate2", help="the CTranslate2 export that translates")
    where.add_argument("--run-dir", help="or the run directory that translates")
    parser.add_argument("--input", help="the lines to translate (default: the default corpus' train.en)")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="translate --runner's --workers")
    parser.add_argument("--prepare-pairs", type=int, help="also time prepare against prepare --runner on N pairs")
    parser.add_argument("--prepare-workers", type=int, default=2, help="prepare --runner's --workers")
    parser.add_argument("--prepare-only", action="store_true",
                        help="time prepare only, keeping the translate rows of OUT/pipeline.json")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="prepare: an override of the settings both roads take")
    parser.add_argument("--sample-s", type=float, default=0.25, help="seconds between samples of the RSS")
    parser.add_argument("--out", default=str(RESULTS), help="directory of pipeline.json and pipeline.md")
    parser.add_argument("--update-summary", action="store_true", help="add the summary keys to OUT/summary.json")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    results = dict(machine=_machine(), date=time.strftime("%Y-%m-%d"), lines=args.lines,
                   input=str(args.input or default_corpus()[0]), artifact=args.ctranslate2 or args.run_dir)
    if args.prepare_only:  # the translate rows of OUT/pipeline.json stay
        kept = json.loads((out / "pipeline.json").read_text())
        results.update({key: kept[key] for key in ("lines", "input", "artifact", "translate")})
        results["prepare_date"] = results.pop("date")
        results["date"] = kept["date"]
    try:
        if not args.prepare_only:
            results["translate"] = bench_translate(args, work)
        if args.prepare_pairs:
            results["prepare"], results["corpus"] = bench_prepare(args, work)
            results["prepare_pairs"] = args.prepare_pairs
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / "pipeline.json").write_text(json.dumps(results, indent=1) + "\n")
    text = report(results)
    (out / "pipeline.md").write_text(text)
    print(text)
    if args.update_summary:
        update_summary(out / "summary.json", results)


def update_summary(path, results):
    """Adds `pipeline_translate_vs_single` and, at 4,500,000 pairs, `pipeline_prepare_4m5_s` to `path`."""
    summary = json.loads(path.read_text()) if path.exists() else {}
    by_workers = {row["workers"]: row for row in results["translate"] if row["road"] != "single process"}
    if 2 in by_workers:
        summary["pipeline_translate_vs_single"] = round(by_workers[2]["lines_per_s"] /
                                                        results["translate"][0]["lines_per_s"], 3)
    piped = [row for row in results.get("prepare", []) if row["road"] != "prepare"]
    if piped and piped[0]["pairs"] == SUMMARY_PAIRS:
        summary["pipeline_prepare_4m5_s"] = round(piped[0]["seconds"], 1)
    elif piped:
        print(f"pipeline_prepare_4m5_s left as it was: {piped[0]['pairs']:,} pairs, not {SUMMARY_PAIRS:,}.")
    path.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
