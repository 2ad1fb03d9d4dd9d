"""How well the quality estimate ranks a run's test translations: its correlation with sentence-level chrF,
against the bare length-normalised log-probability.

    t2t-keras qe-train --run-dir runs/main                        # first: the estimate, fitted on the dev set
    python bench/bench_quality_estimate.py                         # the main job's run (runs/main), its test set
    python bench/bench_quality_estimate.py --run-dir RUN --limit 20 --out-dir /tmp/qe   # a quick try

The test set is the one `t2t-keras evaluate` scores (`evaluation.evaluate_run.load_eval_pairs`, the run's "test"
split), translated by the run's own model under its decoding defaults with `quality=True`; each translation's
sentence chrF against its reference is sacreBLEU's `sentence_chrf`. Rows: the estimate (`quality`), the baseline
(`mean_log_prob`, the length-normalised log-probability of the same teacher-forced pass) and every other feature
alone, each with Pearson and Spearman. Writes OUT/quality_estimate.json and OUT/quality_estimate.md and merges
`qe_pearson_test` (the estimate's Pearson) into OUT/summary.json, keeping its other keys.
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = pathlib.Path(__file__).parent / "results"


def measure(run_dir, limit):
    """The report: the estimate's and each feature's ranking of the test translations by sentence chrF."""
    from t2t_keras.artifacts import open_artifact
    from t2t_keras.decoding.quality_features import FEATURES
    from t2t_keras.evaluation.evaluate_run import load_eval_pairs
    from t2t_keras.evaluation.quality_estimate import ranking, sentence_chrf_scores

    pairs = load_eval_pairs(run_dir, "test")[:limit]
    artifact = open_artifact(run_dir, "auto")
    sources = [source for source, _ in pairs]
    began = time.monotonic()
    generation = artifact.generate(sources, artifact.request(quality=True))  # refused without qe-train's file
    seconds = time.monotonic() - began
    rows = artifact.quality_rows(sources, generation.best)
    chrf = sentence_chrf_scores(generation.best, [target for _, target in pairs])
    report = {"date": time.strftime("%Y-%m-%d"), "run_dir": str(run_dir), "sentences": len(pairs),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "seconds": round(seconds, 1),
              "mean_sentence_chrf": round(float(chrf.mean()), 2),
              "rows": {"quality estimate": ranking(generation.quality, chrf)}}
    for name in FEATURES:
        report["rows"][name] = ranking([row[name] for row in rows], chrf)
    estimate, baseline = report["rows"]["quality estimate"], report["rows"]["mean_log_prob"]
    report["qe_pearson_test"] = estimate["pearson"]
    report["beats_baseline"] = None if None in (estimate["pearson"], baseline["pearson"]) else (
        estimate["pearson"] > baseline["pearson"])
    return report


def table(report):
    def number(value):
        return "n/a" if value is None else f"{value:.3f}"

    lines = [f"Quality estimate on {report['run_dir']} ({report['sentences']} test sentences, mean sentence chrF "
             f"{report['mean_sentence_chrf']}, {report['machine']}):", "",
             "| ranking by | Pearson with sentence chrF | Spearman |", "|---|---:|---:|"]
    lines += [f"| {name}{' (baseline)' if name == 'mean_log_prob' else ''} | {number(row['pearson'])} | "
              f"{number(row['spearman'])} |" for name, row in report["rows"].items()]
    lines += ["", f"The estimate beats the bare length-normalised log-probability: {report['beats_baseline']}."]
    return "\n".join(lines) + "\n"


def update_summary(path, report):
    """Merges `qe_pearson_test` into the summary at `path`, keeping its other keys."""
    from t2t_keras.files import write_text_atomic

    summary = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    summary["qe_pearson_test"] = report["qe_pearson_test"]
    write_text_atomic(path, json.dumps(summary, indent=1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/main", help="the run (with t2t-keras qe-train's estimate)")
    parser.add_argument("--limit", type=int, help="the first N test sentences only (a quick try)")
    parser.add_argument("--out-dir", default=str(RESULTS),
                        help="where quality_estimate.json, quality_estimate.md and summary.json are")
    args = parser.parse_args()

    from t2t_keras.files import write_text_atomic

    report = measure(args.run_dir, args.limit)
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "quality_estimate.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / "quality_estimate.md", table(report))
    update_summary(out / "summary.json", report)
    print(table(report))


if __name__ == "__main__":
    main()
