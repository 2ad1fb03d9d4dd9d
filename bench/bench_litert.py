"""The LiteRT file against the SavedModel and CTranslate2 of the same weights: size, load time, speed at batch 1, BLEU.

    python bench/bench_litert.py --run-dir runs/main                 # writes bench/results/litert.md and .json
    python bench/bench_litert.py --quick --output /tmp/litert-quick   # a tiny run trained a few steps: checks it works

Each engine is exported from the run's weights (those `t2t-keras export`
takes: the averaged model when it includes the newest checkpoint):

* SavedModel: `export_run`, as `t2t-keras export` writes it (XLA off), opened
  as a `SavedModelArtifact`;
* CTranslate2 float32 and int8_float32: `export_ctranslate2_run`, opened as a
  `CTranslate2Artifact` with `--threads` threads;
* LiteRT float32 and int8 (dynamic range): `export_litert_run`, opened as a
  `LiteRTArtifact` (the ai-edge-litert interpreter) with `--threads` threads.

Every engine translates through the same `generate(lines, request)` of `t2t_keras.artifacts`.

TensorFlow runs with `--threads` intra-op threads. "size" is the export on
disk (the SavedModel without the Keras model it keeps for inspection, which
serving does not load), "load" the seconds to open it in this process (the
libraries already imported), "first" the first translation (preparing the
search). Speed: the first `--sentences` test sentences translated one at a
time (batch 1), beam 4 (alpha 0.6) and greedy; the median of `--repeats`
passes, after waiting for a quiet machine (`timing.measure_quietly`; "other
cores" is what other processes used meanwhile). BLEU: sacreBLEU of each
engine on the whole test split with the run's decoding defaults (beam 4).
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import timing  # noqa: E402
from bench_export import generated_text  # noqa: E402
from timing import add_arguments, measure_quietly  # noqa: E402

from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact  # noqa: E402
from t2t_keras.artifacts.litert import LITERT_VERSION, LiteRTArtifact  # noqa: E402
from t2t_keras.artifacts.saved_model import SavedModelArtifact  # noqa: E402
from t2t_keras.evaluation.bleu import score  # noqa: E402
from t2t_keras.evaluation.evaluate_run import load_eval_pairs  # noqa: E402
from t2t_keras.export.ctranslate2_export import export_ctranslate2_run  # noqa: E402
from t2t_keras.export.litert_export import export_litert_run  # noqa: E402
from t2t_keras.export.saved_model import export_run  # noqa: E402
from t2t_keras.runs import open_run  # noqa: E402

ENGINES = ("SavedModel float32", "CTranslate2 float32", "CTranslate2 int8_float32", "LiteRT float32", "LiteRT int8")
METHODS = (("beam 4", 4), ("greedy", 1))


def export(engine, run_dir, out, max_beam_size):
    """Writes `engine`'s export of the run at `out`; returns its path."""
    kind, precision = engine.split()
    if kind == "SavedModel":
        return export_run(run_dir, out, max_beam_size=max_beam_size)
    if kind == "CTranslate2":
        return export_ctranslate2_run(run_dir, out, quantization=precision)
    return export_litert_run(run_dir, out.with_suffix(".tflite"), quantization=precision, max_beam_size=max_beam_size)


def open_engine(engine, path, threads):
    """The export at `path` as an artifact, one sentence a call, on `threads` threads (TensorFlow's: `main`)."""
    if engine.startswith("SavedModel"):
        return SavedModelArtifact(path, batch_size=1)
    if engine.startswith("CTranslate2"):
        return CTranslate2Artifact(path, batch_size=1, threads=threads)
    return LiteRTArtifact(path, threads=threads)


def size_mb(path):
    path = pathlib.Path(path)
    if path.is_file():
        return path.stat().st_size / 1e6
    files = [p for p in path.rglob("*") if p.is_file() and "assets.extra" not in p.parts]
    return sum(p.stat().st_size for p in files) / 1e6


def bench_engine(engine, run_dir, workdir, pairs, target_lang, args):
    """One engine's figures: export, size, load, first call, batch-1 speed per method, BLEU."""
    started = time.perf_counter()
    path = export(engine, run_dir, workdir / engine.replace(" ", "-"), args.max_beam_size)
    row = {"engine": engine, "export_s": time.perf_counter() - started, "size_mb": size_mb(path)}
    started = time.perf_counter()
    artifact = open_engine(engine, path, args.threads)
    row["load_s"] = time.perf_counter() - started
    sentences = [source for source, _ in pairs[:args.sentences]]
    started = time.perf_counter()
    artifact.generate(sentences[:1], artifact.request())
    row["first_s"] = time.perf_counter() - started
    for method, beam_size in METHODS:
        request = artifact.request(beam_size=beam_size, alpha=0.6)
        result = measure_quietly(lambda r=request: [artifact.generate([s], r) for s in sentences], args.repeats,
                                 args.quiet_wait, args.max_other, args.retries)
        row[method] = {"sentences_per_s": len(sentences) / result["median_s"], "other_cores": result["other_cores"]}
    hypotheses = artifact.generate([source for source, _ in pairs], artifact.request()).best
    row["bleu"] = score(hypotheses, [target for _, target in pairs], target_lang=target_lang)["bleu"]
    print(format_row(row), flush=True)
    return row


HEADER = ("| engine | size MB | export s | load s | first call s | beam 4 sentences/s | greedy sentences/s | "
          "test BLEU | other cores |\n|---|---|---|---|---|---|---|---|---|")


def format_row(r):
    other = max(r[method]["other_cores"] for method, _ in METHODS)
    return (f"| {r['engine']} | {r['size_mb']:.1f} | {r['export_s']:.0f} | {r['load_s']:.2f} | {r['first_s']:.2f} | "
            f"{r['beam 4']['sentences_per_s']:.1f} | {r['greedy']['sentences_per_s']:.1f} | {r['bleu']:.2f} | "
            f"{other:.2f} |")


def quick_run(workdir):
    """A tiny run trained for a few steps on generated text (the target: each sentence's words reversed)."""
    from t2t_keras.config import load_config
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training.trainer import train

    files = {}
    for split, count, seed in (("train", 2000, 0), ("dev", 20, 1), ("test", 20, 2)):
        sources = generated_text(count, seed=seed, lexicon_size=200)
        paths = [workdir / f"{split}.en", workdir / f"{split}.de"]
        paths[0].write_text("\n".join(sources) + "\n", encoding="utf-8")
        paths[1].write_text("\n".join(" ".join(s.split()[::-1]) for s in sources) + "\n", encoding="utf-8")
        files[split] = [str(p) for p in paths]
    overrides = {"data.source": "text", "data.train_files": files["train"], "data.dev_files": files["dev"],
                 "data.test_files": files["test"], "data.vocab_size": 500, "training.train_steps": 20,
                 "training.jit_compile": False, "training.checkpoint_every_steps": 20}
    config = load_config("tiny", [f"{k}={v!r}" if isinstance(v, list) else f"{k}={v}" for k, v in overrides.items()])
    train(resolve_run(workdir / "run", config), verbose=0)
    return workdir / "run"


def report(rows, args, run_dir):
    import ctranslate2

    prose = (f"`python bench/bench_litert.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d')}, run "
             f"`{run_dir}`. Batch 1: the first {args.sentences} test sentences one at a time, {args.threads} "
             "threads per engine, beam 4 with alpha 0.6 and greedy; BLEU on the whole test split with the run's "
             "decoding defaults. See the docstring of "
             "`bench/bench_litert.py` for what each column measures.")
    versions = (f"TensorFlow {tf.__version__}, CTranslate2 {ctranslate2.__version__}, ai-edge-litert "
                f"{LITERT_VERSION}")
    return timing.table_report("# LiteRT against the SavedModel and CTranslate2 (same weights)", prose, HEADER,
                               [format_row(r) for r in rows], versions)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", help="the translation run to export (required unless --quick)")
    parser.add_argument("--quick", action="store_true", help="a tiny run trained a few steps, few sentences")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=50, help="test sentences timed at batch 1")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the sentences")
    parser.add_argument("--max-beam-size", type=int, default=4, help="largest beam the exports search")
    parser.add_argument("--output", default="bench/results/litert",
                        help="writes OUTPUT.md and OUTPUT.json (--quick: only when given)")
    add_arguments(parser, quiet_wait=300.0, max_other=0.2)
    args = parser.parse_args(argv)
    if not args.run_dir and not args.quick:
        parser.error("give --run-dir, or --quick")
    if args.quick:
        args.sentences, args.repeats, args.quiet_wait = min(args.sentences, 5), 1, 0.0
        args.output = args.output if "--output" in (argv or sys.argv) else None
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        run_dir = quick_run(workdir) if args.quick else pathlib.Path(args.run_dir)
        pairs = load_eval_pairs(run_dir, "test")
        target_lang = open_run(run_dir).load_config().data.target_lang
        rows = [bench_engine(engine, run_dir, workdir, pairs, target_lang, args) for engine in args.engines]
        text = report(rows, args, run_dir if not args.quick else "(a tiny run, --quick)")
    timing.publish(text, args.output and args.output + ".md")
    if args.output:
        pathlib.Path(args.output + ".json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
