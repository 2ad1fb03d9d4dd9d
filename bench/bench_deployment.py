"""Deployment engines compared in one run: SavedModel (XLA; float32, bfloat16, int8) and CTranslate2 (float32, int8).

    python bench/bench_deployment.py --sizes small base                  # random weights
    python bench/bench_deployment.py --run-dir runs/main --sizes         # the main job's model, with BLEU
    python bench/bench_deployment.py --sizes tiny --batches 1 --repeats 1 --quiet-wait 0   # smoke run
    python bench/bench_deployment.py ... --output bench/results/deployment.md

Every engine translates the same sentences through the same interface
(`SavedModelArtifact` / `CTranslate2Artifact`.generate: strings in,
strings out) with `--threads` CPU threads (TensorFlow's intra-op pool;
CTranslate2: that many searches of one thread each, `Decisions.ctranslate2_threads`;
figures before 2026-12-05 ran one CTranslate2 search on `--threads` threads),
beam 4 (alpha 0.6) and greedy, at each batch size. Random-weight models
(`bench_export`'s generated text and vocabulary) practically never emit EOS, so every output runs to its limit: inputs of
SOURCE_PIECES + 1 tokens, outputs of OUTPUT_TOKENS. With `--run-dir`, the
run's model and tokenizer are used, timed on its test sentences, and each
engine's BLEU on the run's test split is reported (default beam search).
Timing waits for a quiet machine and reports the cores other processes used
(see `timing.measure_quietly`).
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import timing  # noqa: E402
from bench_export import (  # noqa: E402
    EXTRA,
    OUTPUT_TOKENS,
    SOURCE_PIECES,
    bench_sentences,
    generated_text,
    time_artifact,
)
from timing import add_arguments, machine_description  # noqa: E402

from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact  # noqa: E402
from t2t_keras.artifacts.saved_model import SavedModelArtifact  # noqa: E402
from t2t_keras.data.tokenizer import train_sentencepiece  # noqa: E402
from t2t_keras.decoding.request import GenerationRequest  # noqa: E402
from t2t_keras.export.ctranslate2_export import export_ctranslate2  # noqa: E402
from t2t_keras.export.saved_model import export_translator  # noqa: E402
from t2t_keras.model import Transformer  # noqa: E402

SIZES = {
    "tiny": dict(vocab_size=1000, hidden_dim=64, num_layers=2, num_heads=4, intermediate_dim=256),
    "small": dict(vocab_size=8000, hidden_dim=256, num_layers=3, num_heads=4, intermediate_dim=1024),
    "base": dict(vocab_size=8000, hidden_dim=512, num_layers=6, num_heads=8, intermediate_dim=2048),
}
ENGINES = ("SavedModel XLA float32", "SavedModel XLA bfloat16", "SavedModel XLA int8", "CTranslate2 float32",
           "CTranslate2 int8_float32", "CTranslate2 int8")
METHODS = (("beam 4", 4), ("greedy", 1))


def random_model(size, workdir):
    """A random-weight model of `size` and a vocabulary of its size trained on generated text."""
    config = SIZES[size]
    tokenizer = train_sentencepiece(generated_text(20_000), workdir / f"{size}.model", vocab_size=config["vocab_size"])
    model = Transformer(**config, dropout=0.0)
    model.build()
    return model, tokenizer, bench_sentences(tokenizer, 32)


def run_model(run_dir):
    """The run's model, tokenizer, test pairs and target language."""
    from t2t_keras.evaluation.evaluate_run import load_eval_pairs
    from t2t_keras.runs import RunDirectory, load_run

    model, tokenizer = load_run(run_dir)
    return model, tokenizer, load_eval_pairs(run_dir, "test"), RunDirectory(run_dir).load_config().data.target_lang


def bfloat16_copy(model):
    """The same weights under the mixed_bfloat16 policy (bfloat16 compute, float32 variables and logits)."""
    copy = Transformer.from_config(dict(model.get_config(), dtype="mixed_bfloat16"))
    copy.build()
    copy.set_weights(model.get_weights())
    return copy


def make_artifact(engine, model, tokenizer, workdir, args):
    """Exports `model` for `engine` and opens it; returns (artifact, export seconds)."""
    start = time.perf_counter()
    out = workdir / engine.replace(" ", "-")
    request = GenerationRequest(max_extra_length=EXTRA)
    if engine.startswith("SavedModel"):
        source = bfloat16_copy(model) if engine.endswith("bfloat16") else model
        export_translator(source, tokenizer, out, jit_compile=True, request=request,
                          quantization="int8" if engine.endswith("int8") else None)
        seconds = time.perf_counter() - start
        return SavedModelArtifact(out, batch_size=max(args.batches)), seconds
    export_ctranslate2(model, tokenizer, out, quantization=engine.split()[1], request=request)
    seconds = time.perf_counter() - start
    return CTranslate2Artifact(out, batch_size=max(args.batches), threads=args.threads), seconds


def bench_engine(label, engine, artifact, sentences, args):
    return time_artifact(artifact, sentences, METHODS, args, format_row, model=label, engine=engine)


def bleu_of(artifact, pairs, target_lang):
    from t2t_keras.evaluation.bleu import score

    hypotheses = artifact.generate([s for s, _ in pairs], artifact.request(beam_size=4, alpha=0.6)).best
    return score(hypotheses, [t for _, t in pairs], target_lang=target_lang)["bleu"]


HEADER = ("| model | engine | method | batch | ms / sentence | sentences/s | first call s | runs | other cores |\n"
          "|---|---|---|---|---|---|---|---|---|")


def format_row(r):
    per_call = r["median_s"]
    return (f"| {r['model']} | {r['engine']} | {r['method']} | {r['batch']} | {1000 * per_call / r['batch']:.1f} | "
            f"{r['batch'] / per_call:.1f} | {r['first_s']:.1f} | {r['repeats']} | {r['other_cores']:.2f} |")


def bench_model(label, model, tokenizer, sentences, workdir, args, pairs=None, target_lang="de"):
    rows, bleu = [], {}
    for engine in args.engines:
        artifact, export_s = make_artifact(engine, model, tokenizer, workdir / label, args)
        print(f"{label} {engine}: exported in {export_s:.0f} s", flush=True)
        rows += bench_engine(label, engine, artifact, sentences, args)
        if pairs:
            bleu[engine] = bleu_of(artifact, pairs, target_lang)
            print(f"{label} {engine}: BLEU {bleu[engine]:.2f}", flush=True)
    return rows, bleu


def report(rows, bleu):
    lines = [
        "# Deployment engines: SavedModel (XLA) and CTranslate2", "",
        f"`python bench/bench_deployment.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d')}.", "",
        f"Random-weight models: inputs of {SOURCE_PIECES + 1} tokens, outputs of {OUTPUT_TOKENS} "
        f"(max_extra_length={EXTRA}). Median of the timed runs; \"first call\" prepares (and with XLA compiles) "
        "the search.", "", HEADER,
    ]
    lines += [format_row(r) for r in rows]
    if bleu:
        reference = next(iter(bleu.values()))  # the first engine's, float32 unless --engines says otherwise
        lines += ["", "| engine | test BLEU (beam 4) | difference to the first |", "|---|---|---|"]
        lines += [f"| {engine} | {value:.2f} | {value - reference:+.2f} |" for engine, value in bleu.items()]
    import ctranslate2

    versions = f"TensorFlow {tf.__version__}, CTranslate2 {ctranslate2.__version__}"
    lines += ["", "## Machine", "", machine_description(versions), ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=["small", "base"], choices=sorted(SIZES))
    parser.add_argument("--run-dir", help="also benchmark this run's model, with its test BLEU")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9, help="timed calls at batch 1 (a third at larger batches)")
    add_arguments(parser, quiet_wait=300.0, max_other=0.2)
    parser.add_argument("--output", help="write the markdown report here")
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rows, bleu = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        if args.run_dir:
            model, tokenizer, pairs, lang = run_model(args.run_dir)
            sentences = [s for s, _ in pairs[:max(args.batches)]]
            rows, bleu = bench_model("run", model, tokenizer, sentences, workdir, args, pairs, lang)
        for size in args.sizes:
            model, tokenizer, sentences = random_model(size, workdir)
            rows += bench_model(size, model, tokenizer, sentences, workdir, args)[0]
    timing.publish(report(rows, bleu), args.output)


if __name__ == "__main__":
    main()
