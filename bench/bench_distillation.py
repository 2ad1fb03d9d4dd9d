"""Distilled students against their teacher and the main job's model: BLEU, speed, memory and size, per engine.

    PYTHONPATH=$PWD python bench/bench_distillation.py --system teacher=runs/teacher --system mini=runs/main \\
        --system student-mini=runs/student-mini ... --teacher teacher --work-dir runs/distillation-bench \\
        [--b1-sentences 200] [--json bench/results/distillation.json] [--output bench/results/distillation.md] \
        [--engines sm-float32 ct2-float32 ...]

Each `--system NAME=RUN` (a trained translation run; averaged already, as `export` takes `--model auto` weights)
is exported by `t2t-keras` subprocesses into every engine:

- SavedModel: `export --quantization float32` (not `auto`, which picks int8 by size and CPU; with the default
  `--jit-compile false`, every search in graph mode; `sm-float32-auto` with `--jit-compile auto`, the small
  batches' searches with XLA, and `sm-float32-xla` with `--jit-compile true`, every one), the same with
  `--precision bfloat16` (where the CPU has bfloat16 units: avx512_bf16 or amx_bf16 in /proc/cpuinfo),
  `export --quantization int8`, and each of them with `--shortlist` (the run's RUN/shortlist.npz, made by
  `t2t-keras shortlist --run-dir RUN` with its defaults when missing);
- CTranslate2: `export --format ctranslate2 --quantization float32`, `int8`, and `int8` with `--shortlist`
  (its vmap.txt, `use_vmap`).

`--engines` measures a subset. Then every engine is measured in a fresh process of its own (`--measure`, which
makes `switches.kernels`' and `switches.threads`' choices as `t2t-keras translate --saved-model` does),
so that its peak RSS is its own: the test split of the *first* system's run (all systems of one corpus)
translated with beam 4 and greedy, both at batch 32 (the whole split, in order of source length as a batch job
would, after one untimed batch: BLEU and chrF with sacreBLEU's default signature come from these translations)
and at batch 1 (the first `--b1-sentences` sentences of the split, one call each, after one untimed call). Every
search takes the run's `decoding.alpha` and `max_extra_length`. 2 cores: TensorFlow's pools as
`switches.threads` sizes them (recorded as `intra_op_threads`), CTranslate2's `intra_threads=2`. Output tokens are
the target pieces of the translations (the run's SentencePiece model).
Sizes are the bytes of each export directory. Times are wall seconds of the translation calls alone.

The summary keys (`bench/results/summary.json`, with `--summary`): `student_speedup_beam4_b32` (the best
student's fastest engine against the teacher's float32 SavedModel, beam 4, batch 32, sentences/s; the best
student is the fastest of those within 1.0 BLEU of the teacher, or, when none is, the one losing least),
`student_bleu_delta` (that engine's BLEU minus the teacher's float32 SavedModel's), `shortlist_bleu_delta`
(that student's float32 SavedModel with the shortlist minus without) and
`student_savedmodel_vs_ct2_float32_beam4_b32` (that student's fastest SavedModel against its CTranslate2
float32).
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import children  # noqa: E402

SAVED_MODEL_ENGINES = ("sm-float32", "sm-float32-auto", "sm-float32-xla", "sm-bfloat16", "sm-int8",
                       "sm-float32-shortlist", "sm-bfloat16-shortlist",
                       "sm-int8-shortlist")
CT2_ENGINES = ("ct2-float32", "ct2-int8", "ct2-int8-vmap")
METHODS = (("beam4", 4), ("greedy", 1))
THREADS = 2


def t2t(*args):
    command = [sys.executable, "-m", "t2t_keras", *map(str, args)]
    print("$ t2t-keras " + " ".join(map(str, args)), flush=True)
    children.run(command, check=True)


def has_bfloat16():
    flags = pathlib.Path("/proc/cpuinfo").read_text() if pathlib.Path("/proc/cpuinfo").exists() else ""
    return "avx512_bf16" in flags or "amx_bf16" in flags


def export_flags(engine):
    """The `t2t-keras export` flags of `engine`."""
    flags = []
    if engine.startswith("ct2"):
        flags += ["--format", "ctranslate2", "--quantization", engine.split("-")[1]]
        return flags + (["--shortlist"] if engine.endswith("vmap") else [])
    if "bfloat16" in engine:
        flags += ["--precision", "bfloat16"]
    flags += ["--quantization", "int8" if "int8" in engine else "float32"]
    if engine.endswith(("auto", "xla")):  # small batches' searches, or every one, with XLA; the others: none
        flags += ["--jit-compile", "auto" if engine.endswith("auto") else "true"]
    return flags + (["--shortlist"] if engine.endswith("shortlist") else [])


def engines(chosen=None):
    """Every engine this CPU runs, or those of them in `chosen` (`--engines`)."""
    every = [e for e in SAVED_MODEL_ENGINES if has_bfloat16() or "bfloat16" not in e] + list(CT2_ENGINES)
    return [e for e in every if not chosen or e in chosen]


def directory_bytes(path):
    return sum(p.stat().st_size for p in pathlib.Path(path).rglob("*") if p.is_file())


def export_system(name, run, work, chosen=None):
    """Every engine's export of `run` under `work/name`; returns {engine: (path, export seconds, bytes)}."""
    shortlisted = any("shortlist" in e or "vmap" in e for e in engines(chosen))
    if shortlisted and not (pathlib.Path(run) / "shortlist.npz").exists():
        t2t("shortlist", "--run-dir", run)
    exports = {}
    for engine in engines(chosen):
        out = work / name / engine
        began = time.monotonic()
        if not out.exists():
            t2t("export", "--run-dir", run, "--out", out, *export_flags(engine))
        exports[engine] = (out, round(time.monotonic() - began, 1), directory_bytes(out))
    return exports


# ---- one engine, in a process of its own ----

def open_engine(path):
    """The export at `path` as an artifact (`t2t_keras.artifacts`): a SavedModel, or CTranslate2 on THREADS threads."""
    from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact  # noqa: PLC0415
    from t2t_keras.artifacts.saved_model import SavedModelArtifact  # noqa: PLC0415

    if (pathlib.Path(path) / "saved_model.pb").exists():
        return SavedModelArtifact(path, batch_size=32)
    return CTranslate2Artifact(path, batch_size=32, threads=THREADS)


def timed_b32(artifact, sources, request):
    """Translations in input order and the seconds of translating all of them, 32 at a time by source length."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    artifact.generate([sources[i] for i in order[:32]], request)  # untimed: first-call work
    began = time.perf_counter()
    out = artifact.generate([sources[i] for i in order], request).best
    seconds = time.perf_counter() - began
    translations = [""] * len(sources)
    for i, best in zip(order, out):
        translations[i] = best
    return translations, seconds


def timed_b1(artifact, sources, request):
    artifact.generate(sources[:1], request)
    began = time.perf_counter()
    out = [artifact.generate([s], request).best[0] for s in sources]
    return out, time.perf_counter() - began


def measure_engine(args):
    """Prints one JSON object: BLEU, chrF, speed and peak RSS of the engine at `args.measure`."""
    from t2t_keras.switches import kernels, threads  # noqa: PLC0415

    kernels.choose_onednn(args.measure)  # as `t2t-keras translate --saved-model` does, before TensorFlow loads
    threads.choose_intra_op_threads(args.measure)
    import sentencepiece  # noqa: PLC0415

    from t2t_keras.evaluation.bleu import score  # noqa: PLC0415

    sources = pathlib.Path(args.sources).read_text(encoding="utf-8").splitlines()
    references = pathlib.Path(args.references).read_text(encoding="utf-8").splitlines()
    pieces = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer)
    artifact = open_engine(args.measure)
    result = {}
    for method, beam in METHODS:
        request = artifact.request(beam_size=beam)
        translations, seconds = timed_b32(artifact, sources, request)
        tokens = sum(len(p) + 1 for p in pieces.encode(translations))  # EOS included
        scores = score(translations, references, target_lang=args.target_lang)
        result[method] = {"bleu": scores["bleu"], "chrf": scores["chrf"], "signature": scores["signature"],
                          "b32_sentences_s": len(sources) / seconds, "b32_tokens_s": tokens / seconds}
        few = sources[:args.b1_sentences]
        b1, seconds = timed_b1(artifact, few, request)
        tokens = sum(len(p) + 1 for p in pieces.encode(b1))
        result[method].update(b1_sentences_s=len(few) / seconds, b1_tokens_s=tokens / seconds)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["onednn"] = os.environ.get(kernels.VARIABLE, "default")
    result["intra_op_threads"] = os.environ.get(threads.VARIABLE, "default")
    print(json.dumps(result), flush=True)


def measure(path, args, tokenizer, test):
    command = [sys.executable, __file__, "--measure", str(path), "--sources", test[0], "--references", test[1],
               "--tokenizer", tokenizer, "--target-lang", args.target_lang, "--b1-sentences", str(args.b1_sentences)]
    out = subprocess.run(command, check=True, text=True, stdout=subprocess.PIPE).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- the whole benchmark ----

def test_files(run, work):
    from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: PLC0415

    source, reference = work / "test.src", work / "test.ref"
    if not source.exists():
        pairs = load_eval_pairs(run, "test")
        work.mkdir(parents=True, exist_ok=True)
        reference.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
        source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    return str(source), str(reference)


def describe(run):
    out = subprocess.run([sys.executable, "-m", "t2t_keras", "describe", "--run-dir", str(run), "--json"],
                         check=True, text=True, stdout=subprocess.PIPE).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def run_systems(args, work):
    systems = dict(s.split("=", 1) for s in args.system)
    test = test_files(next(iter(systems.values())), work)
    results = json.loads(pathlib.Path(args.json).read_text()) if args.json and pathlib.Path(args.json).exists() \
        else {}
    for name, run in systems.items():
        info = describe(run)
        tokenizer = str(pathlib.Path(run) / "tokenizer.model")
        record = results.setdefault(name, {"run": run, "params": info.get("params"), "engines": {}})
        for engine, (path, export_s, size) in export_system(name, run, work, args.engines).items():
            if engine in record["engines"]:
                continue  # measured in an earlier, interrupted run of the benchmark
            print(f"measuring {name} {engine}", flush=True)
            record["engines"][engine] = dict(measure(path, args, tokenizer, test), export_s=export_s,
                                             size_mb=round(size / 2**20, 1))
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return results, len(pathlib.Path(test[0]).read_text(encoding="utf-8").splitlines())


def best_student(results, teacher):
    base = results[teacher]["engines"]["sm-float32"]
    candidates = []
    for name, record in results.items():
        if not name.startswith("student"):
            continue
        for engine, r in record["engines"].items():
            delta = r["beam4"]["bleu"] - base["beam4"]["bleu"]
            candidates.append((delta >= -1.0, r["beam4"]["b32_sentences_s"] if delta >= -1.0 else delta, name,
                               engine))
    return max(candidates)[2:] if candidates else (None, None)


def summary(results, teacher):
    name, engine = best_student(results, teacher)
    if name is None:
        return {}
    base = results[teacher]["engines"]["sm-float32"]["beam4"]
    engines_ = results[name]["engines"]
    chosen = engines_[engine]["beam4"]
    fastest_sm = max((e for e in engines_ if e.startswith("sm-")),
                     key=lambda e: engines_[e]["beam4"]["b32_sentences_s"])
    return {
        "student_speedup_beam4_b32": round(chosen["b32_sentences_s"] / base["b32_sentences_s"], 2),
        "student_bleu_delta": round(chosen["bleu"] - base["bleu"], 2),
        "shortlist_bleu_delta": round(engines_["sm-float32-shortlist"]["beam4"]["bleu"]
                                      - engines_["sm-float32"]["beam4"]["bleu"], 2),
        "student_savedmodel_vs_ct2_float32_beam4_b32": round(
            engines_[fastest_sm]["beam4"]["b32_sentences_s"] / engines_["ct2-float32"]["beam4"]["b32_sentences_s"], 2),
        "distillation": {"best_student": name, "engine": engine, "fastest_savedmodel": fastest_sm,
                         "source": "bench/results/distillation.md"},
    }


def report(results, sentences, args):
    lines = ["## Distilled students, their teacher and the main job's model on the test split "
             "(`bench/bench_distillation.py`)", "",
             f"{sentences} test sentences; beam 4 and greedy with each run's alpha; batch 32 over the whole split "
             f"(sorted by source length), batch 1 over the first {args.b1_sentences}; 2 cores; peak RSS of the "
             "process that loads the engine and runs every measurement; size: the export directory.", "",
             "| system | parameters | engine | BLEU beam 4 | chrF | BLEU greedy | sent/s beam 4 b1 | b32 "
             "| sent/s greedy b1 | b32 | tokens/s beam 4 b32 | peak RSS MB | size MB |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, record in results.items():
        for engine, r in record["engines"].items():
            b, g = r["beam4"], r["greedy"]
            lines.append(f"| {name} | {record['params']:,} | {engine} | {b['bleu']:.2f} | {b['chrf']:.2f} "
                         f"| {g['bleu']:.2f} | {b['b1_sentences_s']:.1f} | {b['b32_sentences_s']:.1f} "
                         f"| {g['b1_sentences_s']:.1f} | {g['b32_sentences_s']:.1f} | {b['b32_tokens_s']:,.0f} "
                         f"| {r['peak_rss_mb']:,.0f} | {r['size_mb']:.1f} |")
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "?")
    versions = subprocess.run([sys.executable, "-c", "import tensorflow as tf, keras, ctranslate2; print("
                               "f'TensorFlow {tf.__version__}, Keras {keras.__version__}, CTranslate2 "
                               "{ctranslate2.__version__}')"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    signature = next(iter(next(iter(results.values()))["engines"].values()))["beam4"]["signature"]
    lines += ["", f"sacreBLEU `{signature}`. {cpu}, {os.cpu_count()} cores, bfloat16 units: "
              f"{'yes' if has_bfloat16() else 'no'}; {versions}; commit {commit}; {datetime.date.today()}.", ""]
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", action="append", default=[], metavar="NAME=RUN",
                        help="a trained run to measure; names starting with 'student' are students")
    parser.add_argument("--teacher", help="the NAME of the teacher system")
    parser.add_argument("--work-dir", default="runs/distillation-bench")
    parser.add_argument("--b1-sentences", type=int, default=200)
    parser.add_argument("--engines", nargs="+", choices=SAVED_MODEL_ENGINES + CT2_ENGINES,
                        help="measure only these engines (default: every one this CPU runs)")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--json", help="results file (also resumes an interrupted benchmark)")
    parser.add_argument("--output", help="markdown report")
    parser.add_argument("--summary", help="bench/results/summary.json to update with the summary keys")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--sources", help=argparse.SUPPRESS)
    parser.add_argument("--references", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.measure:
        return measure_engine(args)
    results, sentences = run_systems(args, pathlib.Path(args.work_dir))
    text = report(results, sentences, args)
    if args.output:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    if args.summary and args.teacher:
        path = pathlib.Path(args.summary)
        data = json.loads(path.read_text())
        keys = summary(results, args.teacher)
        data.setdefault("detail", {})["distillation"] = keys.pop("distillation", None)
        data.update(keys)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(json.dumps(keys))
    return None


if __name__ == "__main__":
    main()
