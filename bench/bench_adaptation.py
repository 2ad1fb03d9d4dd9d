"""Domain adaptation on the Debian package descriptions, from a run trained on the LibreOffice help.

    PYTHONPATH=$PWD python bench/bench_adaptation.py --base-run runs/main --work-dir runs/adapt --steps 2400 \\
        [--ranks 8 32] [--constant-rate 0.0003] [--json bench/results/adaptation.json] \\
        [--output bench/results/adaptation.md]

Systems, each a new run started with `t2t-keras train --init-from BASE` on `data.source=debian_descriptions`,
trained for the same budget with BASE's vocabulary: `--steps` updates (`training.train_steps`; a budget that
other work on the machine cannot change) or `--minutes` of training. The report gives each training's CPU
minutes (user + system time of its process) beside its wall minutes.

- **full**: every weight trains, with the restarted schedule (eq. (3) with its own warmup; the default);
- **full, constant rate** (`--constant-rate R`): every weight trains at the constant rate R (no warmup);
- **LoRA r=R** for each of `--ranks`: `training.lora_rank=R`, only the adapters train, restarted schedule.

Every command is a `t2t-keras` subprocess, run as written in the report. Each new run is averaged
(`t2t-keras average`, the last `training.average_last` checkpoints, §6.1), then translated with its own
decoding settings (BASE's) and scored by `t2t-keras evaluate --json` on the Debian test split (in domain) and on
the LibreOffice help test split (the domain it came from: what it loses there is forgetting). BASE itself is
scored on both. Trained parameters come from `t2t-keras describe --run-dir RUN --json`.
"""

import argparse
import datetime
import json
import os
import pathlib
import resource
import shlex
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import children  # noqa: E402

SOURCE = "debian_descriptions"


def t2t(*args, capture=False):
    """Runs `t2t-keras ARGS` (this interpreter's package), echoing the command; returns stdout when `capture`."""
    command = [sys.executable, "-m", "t2t_keras", *map(str, args)]
    print("$ t2t-keras " + " ".join(shlex.quote(str(a)) for a in args), flush=True)
    result = children.run(command, check=True, text=True, stdout=subprocess.PIPE if capture else None)
    return result.stdout if capture else None


def last_json(text):
    """The last line of `text` that parses as a JSON object."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON object in the output:\n{text[-2000:]}")


def libreoffice_test_files(base, work):
    """The LibreOffice help test split as two files (the base run's `evaluate --split test` pairs)."""
    from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: PLC0415 (TensorFlow loads here)

    source, reference = work / "libreoffice-test.en", work / "libreoffice-test.de"
    if not source.exists():
        pairs = load_eval_pairs(base, "test")
        source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        reference.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return source, reference


def debian_test_files():
    """The Debian descriptions' test split as two files (the corpus is built first when missing)."""
    from t2t_keras.data.debian_descriptions import prepare_debian_corpus  # noqa: PLC0415

    corpus = prepare_debian_corpus().directory
    return corpus / "test.en", corpus / "test.de"


def scores(run, debian, libreoffice):
    """BLEU and chrF of `run` on the Debian and LibreOffice test sets."""
    result = {}
    for name, (source, reference) in (("debian", debian), ("libreoffice", libreoffice)):
        out = last_json(t2t("evaluate", "--run-dir", run, "--source", source, "--reference", reference, "--json",
                            capture=True))
        result[name] = {"bleu": out["bleu"], "chrf": out["chrf"], "signature": out.get("signature"),
                        "decode_seconds": out.get("decode_seconds")}
    return result


def describe(run):
    out = last_json(t2t("describe", "--run-dir", run, "--json", capture=True))
    return {key: out.get(key) for key in ("params", "trainable_params", "frozen_params")}


def systems(args):
    """(name, extra `--set` values) of every adapted system."""
    chosen = [("full", [])]
    if args.constant_rate:
        chosen.append((f"full, constant rate {args.constant_rate:g}", [f"training.learning_rate={args.constant_rate}"]))
    chosen += [(f"LoRA r={rank}", [f"training.lora_rank={rank}"]) for rank in args.ranks]
    return chosen


def adapt(base, work, name, settings, args):
    """Trains, averages and describes one adapted run; returns its record."""
    run = work / name.replace(" ", "-").replace(",", "").replace("=", "")
    sets = [f"data.source={SOURCE}", *settings, *args.set]
    if args.steps:
        sets.append(f"training.train_steps={args.steps}")
    budget = ["--minutes", args.minutes] if args.minutes else []
    began, cpu = time.monotonic(), child_cpu_seconds()
    t2t("train", "--init-from", base, "--run-dir", run, "--config", args.config, *budget,
        *[x for value in sets for x in ("--set", value)])
    minutes, cpu_minutes = (time.monotonic() - began) / 60, (child_cpu_seconds() - cpu) / 60
    t2t("average", "--run-dir", run)
    return {"name": name, "run": str(run), "settings": sets, "wall_minutes": round(minutes, 1),
            "cpu_minutes": round(cpu_minutes, 1),
            "final_step": final_step(run), **describe(run)}


def child_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def final_step(run):
    """The step of the run's newest checkpoint."""
    from t2t_keras.runs import RunDirectory, checkpoint_step  # noqa: PLC0415

    paths = RunDirectory(run).checkpoint_paths()
    return max(checkpoint_step(path) for path in paths) if paths else None


def budget_text(args):
    parts = ([f"`--set training.train_steps={args.steps}`"] if args.steps else []) + \
        ([f"`--minutes {args.minutes:g}`"] if args.minutes else [])
    return " and ".join(parts)


def report(base_record, records, args):
    lines = ["## Domain adaptation: LibreOffice help → Debian package descriptions (`bench/bench_adaptation.py`)", "",
             f"Base: `{args.base_run}` ({base_record['params']:,} parameters). Each adapted run: `t2t-keras train "
             f"--init-from BASE --config {args.config} --set data.source={SOURCE} ...` with {budget_text(args)} "
             "on 2 CPU cores, then `average` (last checkpoints); test BLEU/chrF (sacreBLEU, "
             f"`{base_record['scores']['debian']['signature']}`) with the base's decoding settings. \"forgetting\": "
             "BLEU lost on the LibreOffice help test against the base.", "",
             "| system | trained parameters | updates | wall / CPU minutes | Debian BLEU | Debian chrF | LibreOffice BLEU "
             "| LibreOffice chrF | forgetting |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base_lo = base_record["scores"]["libreoffice"]["bleu"]
    for r in [base_record, *records]:
        s = r["scores"]
        lines.append(f"| {r['name']} | {r['trainable_params'] or 0:,} | {r.get('final_step') or '—'} "
                     f"| {r.get('wall_minutes', '—')} / {r.get('cpu_minutes', '—')} "
                     f"| {s['debian']['bleu']:.2f} | {s['debian']['chrf']:.2f} "
                     f"| {s['libreoffice']['bleu']:.2f} | {s['libreoffice']['chrf']:.2f} "
                     f"| {base_lo - s['libreoffice']['bleu']:+.2f} |")
    cpu = next((line.split(":", 1)[1].strip() for line in
                subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                if line.startswith("Model name")), "unknown CPU")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines += ["", f"{cpu}, {os.cpu_count()} cores; commit {commit}; {datetime.date.today()}.", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-run", required=True, help="a translation run trained on the LibreOffice help")
    parser.add_argument("--work-dir", required=True, help="where the adapted runs go")
    parser.add_argument("--config", default="mini", help="the adapted runs' config (its model section is the base's)")
    parser.add_argument("--steps", type=int, help="updates of each adapted run (training.train_steps)")
    parser.add_argument("--minutes", type=float, help="training minutes of each adapted run")
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 32], help="LoRA ranks")
    parser.add_argument("--constant-rate", type=float, help="also fine-tune every weight at this constant rate")
    parser.add_argument("--set", action="append", default=[], help="more config overrides for every adapted run")
    parser.add_argument("--json", help="write every record here")
    parser.add_argument("--output", help="write the markdown report here")
    args = parser.parse_args(argv)
    if not (args.steps or args.minutes):
        parser.error("give the budget of each adapted run: --steps N, --minutes M, or both.")
    base, work = pathlib.Path(args.base_run), pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    debian, libreoffice = debian_test_files(), libreoffice_test_files(base, work)
    base_record = {"name": "base (no adaptation)", "run": str(base), **describe(base), "trainable_params": 0}
    base_record["scores"] = scores(base, debian, libreoffice)
    records = []
    for name, settings in systems(args):
        record = adapt(base, work, name, settings, args)
        record["scores"] = scores(pathlib.Path(record["run"]), debian, libreoffice)
        records.append(record)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({"base": base_record, "adapted": records}, indent=1))
    text = report(base_record, records, args)
    if args.output:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
