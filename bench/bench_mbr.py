"""MBR decoding against beam search on a run's test set: sacreBLEU, chrF and seconds per sentence.

    python bench/bench_mbr.py                                # the main job's run (runs/main), its whole test set
    python bench/bench_mbr.py --run-dir RUN --limit 5 --out-dir /tmp/mbr   # a quick try, results kept out of bench/

The test set is the one `t2t-keras evaluate` and the main job score (`evaluation.evaluate_run.load_eval_pairs`,
the run's "test" split); each row is scored by the library's own `evaluate` (`evaluation.evaluate_run`) under its
request, through the run's own model (`open_artifact(RUN, "auto")`, as the main job evaluates it). Rows:

    beam 4                      the paper's search (beam 4, the run's length penalty)
    MBR-chrF, 8 beam            --mbr chrf --candidates 8 --candidates-from beam
    MBR-chrF, 32 / 64 epsilon   --mbr chrf --candidates 32 / 64 (epsilon 0.02, temperature 1, --seed)
    each MBR row also with --mbr-aggregate (reference aggregation: N chrF per sentence instead of N^2)

Seconds per sentence: the wall time of the row's `evaluate` (generation, MBR choice, scoring) over the sentences,
after the first `--warmup` sentences generated untimed under the same request (its searches traced). Writes
OUT/mbr.json and OUT/mbr.md and merges `mbr_chrf_gain` (chrF of the MBR row of the highest chrF minus beam 4's)
and `mbr_seconds_per_sentence` (that row's) into OUT/summary.json, keeping its other keys.
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = pathlib.Path(__file__).parent / "results"
# (row name, request fields): beam 4 first, the baseline of the gain.
ROWS = [("beam 4", {"beam_size": 4})]
for _candidates, _source, _name in ((8, "beam", "8 beam"), (32, "sample", "32 epsilon"), (64, "sample", "64 epsilon")):
    for _aggregate in (False, True):
        ROWS.append((f"MBR-chrF, {_name}{', aggregate' if _aggregate else ''}",
                     {"mbr": "chrf", "candidates": _candidates, "candidates_from": _source,
                      "mbr_aggregate": _aggregate}))


def measure(artifact, run_dir, pairs, fields, seed, warmup):
    """One row: `evaluate` of the `pairs` under the artifact's request with `fields`, timed after an untimed
    generation of the first `warmup` sources."""
    from t2t_keras.evaluation.evaluate_run import evaluate
    from t2t_keras.files import write_text_atomic

    if fields.get("candidates_from") == "sample":
        fields = dict(fields, seed=seed)
    request = artifact.request(**fields)
    artifact.generate([source for source, _ in pairs[:warmup]], request)  # untimed: its searches traced
    with tempfile.TemporaryDirectory() as directory:
        source, reference = pathlib.Path(directory) / "source.txt", pathlib.Path(directory) / "reference.txt"
        for path, side in ((source, 0), (reference, 1)):
            write_text_atomic(path, "".join(pair[side] + "\n" for pair in pairs))
        began = time.monotonic()
        result = evaluate(artifact, run_dir, source=str(source), reference=str(reference), request=request)
        seconds = time.monotonic() - began
    return {"bleu": result["bleu"], "chrf": result["chrf"], "sentences": result["sentences"],
            "seconds_per_sentence": round(seconds / len(pairs), 4), "request": fields}


def table(report):
    lines = [f"MBR decoding on {report['run_dir']} ({report['sentences']} test sentences, {report['machine']}):", "",
             "| setting | sacreBLEU | chrF | seconds per sentence |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {row['bleu']} | {row['chrf']} | {row['seconds_per_sentence']} |"
              for name, row in report["rows"].items()]
    lines += ["", f"Best MBR setting: {report['best']} (chrF gain over beam 4: {report['mbr_chrf_gain']})."]
    return "\n".join(lines) + "\n"


def update_summary(path, report):
    """Merges the two MBR figures into the summary at `path`, keeping its other keys."""
    from t2t_keras.files import write_text_atomic

    summary = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    summary["mbr_chrf_gain"] = report["mbr_chrf_gain"]
    summary["mbr_seconds_per_sentence"] = report["rows"][report["best"]]["seconds_per_sentence"]
    write_text_atomic(path, json.dumps(summary, indent=1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/main", help="the run whose test set and model are measured")
    parser.add_argument("--limit", type=int, help="the first N test sentences only (a quick try)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sampled candidates")
    parser.add_argument("--warmup", type=int, default=32, help="sentences generated untimed before each row")
    parser.add_argument("--out-dir", default=str(RESULTS), help="where mbr.json, mbr.md and summary.json are")
    args = parser.parse_args()

    from t2t_keras.artifacts import open_artifact
    from t2t_keras.evaluation.evaluate_run import load_eval_pairs
    from t2t_keras.files import write_text_atomic

    pairs = load_eval_pairs(args.run_dir, "test")[:args.limit]
    artifact = open_artifact(args.run_dir, "auto")
    report = {"date": time.strftime("%Y-%m-%d"), "run_dir": args.run_dir, "sentences": len(pairs),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "rows": {}}
    for name, fields in ROWS:
        report["rows"][name] = measure(artifact, args.run_dir, pairs, fields, args.seed, args.warmup)
        print(name, report["rows"][name], flush=True)
    mbr_rows = [name for name in report["rows"] if name != "beam 4"]
    report["best"] = max(mbr_rows, key=lambda name: report["rows"][name]["chrf"])
    report["mbr_chrf_gain"] = round(report["rows"][report["best"]]["chrf"] - report["rows"]["beam 4"]["chrf"], 2)
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "mbr.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / "mbr.md", table(report))
    update_summary(out / "summary.json", report)
    print(table(report))


if __name__ == "__main__":
    main()
