"""The main job's configuration search: candidates trained for the same budget, decided by dev BLEU, per machine.

    python bench/config_search.py list                                   # the candidates and what each changes
    python bench/config_search.py train mini lr3 drop0 --minutes 30      # one full-budget run each, then dev BLEU
    python bench/config_search.py decode mini --average 1,3,5,6 --beam 1,4 --alpha 0.6,1.0,1.4
    python bench/config_search.py score layers3 --commit 7299579         # a run trained but never scored
    python bench/config_search.py table                                  # every record, grouped by machine

`train` runs, per candidate, `t2t-keras train --config mini --minutes M` with the candidate's `--set` overrides in
ROOT/<machine>/<candidate>-<M>min/, averages its last checkpoints as `mini` does (`t2t-keras average`), and scores
the dev split with beam 4 and `mini`'s α (`t2t-keras evaluate --split dev`), as the main job decodes. The record
(updates in the budget, the training steps' share of it, dev sacreBLEU and chrF, the last quality point's dev loss)
goes to `--record` under the machine it was measured on: what a budget of minutes buys depends on the CPU (a 2-core AMD
EPYC with AVX-512 BF16 made 11,400 updates of `mini` in 30 minutes, one with AVX2 only 2,600), so candidates are
compared only within one machine class, and a candidate already recorded there for the same budget is skipped
(`--again` retrains it). The search can therefore go on across sessions on the same kind of machine.

`decode` takes one finished run through the decisions made after training: how many checkpoints to average, beam
size and α, each scored on the dev split. The test split is never scored here: the main job scores it once, for
the chosen configuration. Nothing else may run on the machine while a candidate trains.
"""

import argparse
import datetime
import hashlib
import itertools
import json
import os
import pathlib
import platform
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import children  # noqa: E402
from t2t_keras.config import load_config  # noqa: E402
from t2t_keras.fast_path import CPU_BFLOAT16_FLAGS, cpu_flags  # noqa: E402
from t2t_keras.files import write_text_atomic  # noqa: E402
from t2t_keras.runs import open_run  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECORD = ROOT / "bench" / "results" / "config-search.json"
# How the main job decodes `mini` (configs/mini.yaml): its last checkpoints averaged, its beam and α.
MINI = load_config("mini")
BEAM, ALPHA, AVERAGE = MINI.decoding.beam_size, MINI.decoding.alpha, MINI.training.average_last

# name -> (the dimension, the `--set` overrides on top of `mini`); a record keeps the digest of the `mini` it
# was relative to (`preset_digest`): the records made before `mini` took two layers say "mini at N=3" instead, and
# name their candidates relative to that preset (`layers2` there is today's `mini`).
CANDIDATES = {
    "mini": ("the preset as it is", []),
    "lr1": ("learning rate", ["training.learning_rate_scale=1.0"]),
    "lr3": ("learning rate", ["training.learning_rate_scale=3.0"]),
    "warmup200": ("warmup", ["training.warmup_steps=200"]),
    "warmup800": ("warmup", ["training.warmup_steps=800"]),
    # The same peak as `mini` (scale / sqrt(warmup) unchanged), a lower rate after it: `mini`'s before 2026-12-03
    # (2x eq. (3) after 400 warmup updates), the runner-up and one between: 0.5x, 0.75x and 0.625x today's rate
    # after the peak. The records name today's `mini` `lr4warmup1600`, relative to the one before.
    "lr2warmup400": ("learning rate and warmup together", ["training.learning_rate_scale=2.0",
                                                            "training.warmup_steps=400"]),
    "lr3warmup900": ("learning rate and warmup together", ["training.learning_rate_scale=3.0",
                                                             "training.warmup_steps=900"]),
    "lr2.5warmup625": ("learning rate and warmup together", ["training.learning_rate_scale=2.5",
                                                               "training.warmup_steps=625"]),
    "batch1024": ("batch tokens", ["data.batch_tokens=1024"]),
    "batch4096": ("batch tokens", ["data.batch_tokens=4096"]),
    "ls0": ("label smoothing", ["training.label_smoothing=0.0"]),
    "ls0.1": ("label smoothing", ["training.label_smoothing=0.1"]),
    "ls0.3": ("label smoothing", ["training.label_smoothing=0.3"]),
    "drop0": ("dropout", ["model.dropout=0.0"]),
    "drop0.2": ("dropout", ["model.dropout=0.2"]),
    "drop0.3": ("dropout", ["model.dropout=0.3"]),
    "dropinner": ("dropout on attention weights and inside the feed-forward network too (tensor2tensor's)",
                  ["model.attention_dropout=0.1", "model.activation_dropout=0.1"]),
    "vocab2000": ("vocabulary", ["data.vocab_size=2000"]),
    "vocab8000": ("vocabulary", ["data.vocab_size=8000"]),
    "layers1": ("depth", ["model.num_layers=1"]),
    "layers3": ("depth", ["model.num_layers=3"]),
    "layers4": ("depth", ["model.num_layers=4"]),
    "enc6dec2": ("deeper encoder, shallower decoder", ["model.num_layers=6", "model.num_decoder_layers=2"]),
    "enc4dec2": ("deeper encoder, shallower decoder", ["model.num_layers=4", "model.num_decoder_layers=2"]),
    "width128": ("width", ["model.hidden_dim=128", "model.intermediate_dim=512"]),
    "enc3dec1": ("deeper encoder, shallower decoder", ["model.num_layers=3", "model.num_decoder_layers=1"]),
    "postln": ("post-LN, the paper's, at eq. (3)'s own rate", ["model.normalize_first=false",
                                                                "training.learning_rate_scale=1.0"]),
    # §3.5's added sinusoids in place of T5's learned relative position bias, mini's since 2026-12-05
    "sinusoidal": ("position encoding", ["model.position_encoding=sinusoidal"]),
}


def machine(cpuinfo="/proc/cpuinfo"):
    """The CPU a budget of minutes was spent on, and the class that decides what it buys: its widest vector unit
    and whether it computes bfloat16 (the fast path's own test, `t2t_keras.fast_path`)."""
    try:
        lines = pathlib.Path(cpuinfo).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    fields = {}
    for key, _, value in (line.partition(":") for line in lines):
        fields.setdefault(key.strip(), value.strip())
    flags = cpu_flags(cpuinfo)
    bfloat16 = sorted(set(CPU_BFLOAT16_FLAGS) & flags)
    widest = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    cpu = fields.get("model name", platform.processor() or "unknown")
    return {"cores": os.cpu_count(), "python": platform.python_version(), "cpu": cpu,
            "cpu_family_model": f"{fields.get('cpu family', '?')}/{fields.get('model', '?')}", "bfloat16": bfloat16,
            "class": f"{cpu}, {widest}" + ("+bf16" if bfloat16 else "")}


def slug(text):
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def t2t(*args, capture=False):
    command = [sys.executable, "-m", "t2t_keras", *map(str, args)]
    print("+", " ".join(command[2:]), flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    result = children.run(command, check=True, env=env, cwd=ROOT, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return result.stdout


def dev_score(run_dir, beam=BEAM, alpha=ALPHA):
    search = ["--beam-size", beam] + (["--alpha", alpha] if alpha is not None else [])
    result = json.loads(t2t("evaluate", "--run-dir", run_dir, "--split", "dev", "--json", *search,
                            capture=True).strip().splitlines()[-1])
    return {"dev_bleu": round(result["bleu"], 2), "dev_chrf": round(result["chrf"], 2)}


def run_figures(run_dir):
    run = open_run(run_dir)
    # The training's own record: a main job's run also holds the whole job's, which counts no final step.
    timing = [t for t in run.read_json(run.timing_path) if t.get("kind", "train") == "train"][-1]
    quality = (run.read_json(run.quality_path) or {}).get("points") or []  # none in a run under 5 minutes
    return {"updates": timing["final_step"],
            "train_share": round(timing["parts"]["training steps"] / timing["seconds"], 3),
            "dev_loss_quality_sample": quality[-1]["loss"] if quality else None}


def load(record):
    return json.loads(record.read_text()) if record.exists() else {"runs": [], "decoding": []}


def save(record, data):
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(record, json.dumps(data, indent=1) + "\n")


def commit():
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE).stdout.strip()


def preset_digest():
    """The `mini` a candidate's overrides apply to, as a short digest of its resolved settings: a record made
    relative to another `mini` is another configuration."""
    settings = json.dumps(load_config("mini").to_dict(), sort_keys=True, default=str)
    return "mini " + hashlib.sha256(settings.encode()).hexdigest()[:10]


def recorded(data, here, name, minutes):
    """The records of candidate `name` for `minutes` on the machine class of `here`, relative to today's `mini`."""
    preset = preset_digest()
    return [r for r in data["runs"] if r["machine"]["class"] == here["class"] and r["candidate"] == name
            and r["minutes"] == minutes and r.get("preset") == preset]


def record_run(args, name, run_dir, here, trained_at):
    """Averages a trained candidate's last checkpoints, scores the dev split, and adds the row to the record;
    `trained_at`: the commit the candidate was trained at."""
    dimension, overrides = CANDIDATES[name]
    t2t("average", "--run-dir", run_dir, "--last", AVERAGE)
    row = {"candidate": name, "dimension": dimension, "overrides": overrides, "preset": preset_digest(),
           "minutes": args.minutes,
           "date": datetime.date.today().isoformat(), "commit": trained_at, "machine": here,
           "run_dir": str(run_dir), "decoding": f"last {AVERAGE} averaged, beam {BEAM}, alpha {ALPHA}",
           **run_figures(run_dir), **dev_score(run_dir)}
    data = load(args.record)
    data["runs"].append(row)
    save(args.record, data)
    print(json.dumps(row))


def cmd_train(args):
    here = machine()
    for name in args.names:
        done = recorded(load(args.record), here, name, args.minutes)
        if done and not args.again:
            print(f"{name}: recorded on {here['class']} for {args.minutes} min (dev BLEU {done[-1]['dev_bleu']}); "
                  "--again trains it again")
            continue
        run_dir = args.root / slug(here["class"]) / f"{name}-{args.minutes:g}min"
        if run_dir.exists():
            raise SystemExit(f"{run_dir} exists: a candidate trains from a fresh run directory. Remove it.")
        sets = [flag for override in CANDIDATES[name][1] for flag in ("--set", override)]
        if args.keep_checkpoints:  # more checkpoints on disk for `decode --average`; the training is the same
            sets += ["--set", f"training.keep_checkpoints={args.keep_checkpoints}"]
        t2t("train", "--config", "mini", "--minutes", args.minutes, "--run-dir", run_dir, *sets)
        record_run(args, name, run_dir, here, commit())


def cmd_score(args):
    """Records a candidate whose training finished but was never scored (the harness stopped after `train`)."""
    here = machine()
    done = recorded(load(args.record), here, args.name, args.minutes)
    if done:
        raise SystemExit(f"{args.name}: already recorded on {here['class']} for {args.minutes:g} min "
                         f"(dev BLEU {done[-1]['dev_bleu']}).")
    run_dir = args.root / slug(here["class"]) / f"{args.name}-{args.minutes:g}min"
    if not (run_dir / "timing.json").exists():
        raise SystemExit(f"{run_dir} holds no finished training (no timing.json): train it with "
                         f"`config_search.py train {args.name} --minutes {args.minutes:g}`.")
    record_run(args, args.name, run_dir, here, args.commit)


def cmd_decode(args):
    data = load(args.record)
    run = [r for r in data["runs"] if r["candidate"] == args.name and r["machine"]["class"] == machine()["class"]
           and (args.minutes is None or r["minutes"] == args.minutes)][-1]
    run_dir = pathlib.Path(run["run_dir"])
    for average in args.average:
        t2t("average", "--run-dir", run_dir, "--last", average)
        for beam in args.beam:
            for alpha in args.alpha if beam > 1 else [None]:  # greedy search has no length penalty
                row = {"candidate": run["candidate"], "minutes": run["minutes"], "machine": run["machine"],
                       "average_last": average, "beam": beam, "alpha": alpha,
                       **dev_score(run_dir, beam, alpha)}
                data = load(args.record)
                data["decoding"].append(row)
                save(args.record, data)
                print(json.dumps(row))
    t2t("average", "--run-dir", run_dir, "--last", AVERAGE)  # the run as the main job would leave it


def cmd_table(args):
    data = load(args.record)
    for cls, runs in itertools.groupby(sorted(data["runs"], key=lambda r: r["machine"]["class"]),
                                       key=lambda r: r["machine"]["class"]):
        print(f"\n{cls}\n\n| candidate | changes | on | commit | minutes | updates | training share | dev BLEU | "
              "dev chrF |")
        print("|---|---|---|---|---:|---:|---:|---:|---:|")
        for r in sorted(runs, key=lambda r: -r["dev_bleu"]):
            print(f"| {r['candidate']} | {', '.join(r['overrides']) or '-'} | {r.get('preset', '?')} | {r['commit']} | "
                  f"{r['minutes']:g} | "
                  f"{r['updates']:,} | {r['train_share']:.2f} | {r['dev_bleu']:.2f} | {r['dev_chrf']:.2f} |")
    for cls, rows in itertools.groupby(sorted(data["decoding"], key=lambda r: r["machine"]["class"]),
                                       key=lambda r: r["machine"]["class"]):
        print(f"\n{cls}, decoding\n\n| candidate | averaged | beam | alpha | dev BLEU | dev chrF |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['candidate']} | {r['average_last']} | {r['beam']} | {r['alpha'] or '-'} | "
                  f"{r['dev_bleu']:.2f} | {r['dev_chrf']:.2f} |")


def cmd_list(args):
    for name, (dimension, overrides) in CANDIDATES.items():
        print(f"{name:10} {dimension}: {' '.join(overrides) or '-'}")


def numbers(kind):
    return lambda text: [kind(x) for x in text.split(",")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=pathlib.Path, default=RECORD)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list").set_defaults(run=cmd_list)
    commands.add_parser("table").set_defaults(run=cmd_table)
    train = commands.add_parser("train")
    train.add_argument("names", nargs="+", choices=sorted(CANDIDATES))
    train.add_argument("--minutes", type=float, default=30.0)
    train.add_argument("--root", type=pathlib.Path, default=pathlib.Path("runs/config-search"))
    train.add_argument("--again", action="store_true")
    train.add_argument("--keep-checkpoints", type=int,
                       help=f"checkpoints kept on disk (mini keeps {MINI.training.keep_checkpoints}), so that "
                       "`decode --average` can try more")
    train.set_defaults(run=cmd_train)
    score = commands.add_parser("score")
    score.add_argument("name", choices=sorted(CANDIDATES))
    score.add_argument("--minutes", type=float, default=30.0)
    score.add_argument("--root", type=pathlib.Path, default=pathlib.Path("runs/config-search"))
    score.add_argument("--commit", default="?", help="the commit the run was trained at (a run does not record it)")
    score.set_defaults(run=cmd_score)
    decode = commands.add_parser("decode")
    decode.add_argument("name", choices=sorted(CANDIDATES))
    decode.add_argument("--minutes", type=float)
    decode.add_argument("--average", type=numbers(int), default=[AVERAGE])
    decode.add_argument("--beam", type=numbers(int), default=[BEAM])
    decode.add_argument("--alpha", type=numbers(float), default=[ALPHA])
    decode.set_defaults(run=cmd_decode)
    args = parser.parse_args(argv)
    if getattr(args, "root", None) is not None:
        args.root = args.root.resolve()
    args.run(args)


if __name__ == "__main__":
    main()
