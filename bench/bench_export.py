"""Latency of the translation SavedModel at the `small` size: batch 1 and 32, beam 4 and greedy, XLA off and on.

    python bench/bench_export.py                                  # prints a markdown report
    python bench/bench_export.py --output bench/results/export.md

Model: `small` Transformer (d_model 256, 3+3 layers, d_ff 1024, 4 heads),
random weights, with an 8000-piece SentencePiece BPE vocabulary trained on
generated text (random words over a 4000-word lexicon). Inputs: generated
sentences of exactly SOURCE_PIECES pieces. Random weights practically never
emit EOS, so every output runs to its limit, input length (EOS included) +
`max_extra_length` = OUTPUT_TOKENS tokens.

Each export (max_beam_size 8, as shipped) is written with
`export_translator`, reloaded in this process as a `SavedModelArtifact`
(`artifacts.open_artifact`), and called through `generate` (strings in,
strings out: tokenizer, search and detokenizer in the graph). "greedy" is beam size 1. Every configuration waits
for a quiet machine, makes one untimed call (the "first call" column:
preparing the search, and with XLA compiling it for that shape), then times
`--repeats` calls and reports the median; "other cores" is the CPU other
processes used meanwhile (measured again, up to `--retries` times, when it
exceeds `--max-other`).
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import timing  # noqa: E402
from timing import machine_description, measure_quietly  # noqa: E402

from t2t_keras.artifacts.saved_model import SavedModelArtifact  # noqa: E402
from t2t_keras.data.tokenizer import train_sentencepiece  # noqa: E402
from t2t_keras.decoding.request import GenerationRequest  # noqa: E402
from t2t_keras.export.saved_model import export_translator  # noqa: E402
from t2t_keras.model import Transformer  # noqa: E402

SMALL = dict(vocab_size=8000, hidden_dim=256, num_layers=3, num_heads=4, intermediate_dim=1024, dropout=0.0)
SOURCE_PIECES = 23  # + EOS = 24 input tokens
EXTRA = 8  # output tokens = 24 + 8 = 32
OUTPUT_TOKENS = SOURCE_PIECES + 1 + EXTRA
CONFIGS = [("beam 4", 4), ("greedy", 1)]


def generated_text(count, seed=0, lexicon_size=4000):
    """Sentences of 8-20 random words over a random lexicon: enough variety for 8000 BPE pieces."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lexicon = ["".join(rng.choice(letters, size=rng.integers(2, 11))) for _ in range(lexicon_size)]
    return [" ".join(rng.choice(lexicon, size=rng.integers(8, 21))) for _ in range(count)]


def bench_sentences(tokenizer, count):
    """`count` generated sentences of exactly SOURCE_PIECES pieces."""
    candidates = generated_text(20_000, seed=1)
    lengths = tokenizer.tokenize(tf.constant(candidates)).row_lengths().numpy()
    chosen = [s for s, n in zip(candidates, lengths) if n == SOURCE_PIECES]
    if len(chosen) < count:
        raise RuntimeError(f"only {len(chosen)} generated sentences have {SOURCE_PIECES} pieces")
    return chosen[:count]


def prepare(workdir):
    """The random `small` model and an 8000-piece vocabulary trained on generated text."""
    tokenizer = train_sentencepiece(generated_text(20_000), workdir / "vocab.model", vocab_size=SMALL["vocab_size"])
    model = Transformer(**SMALL)
    model.build()
    return model, tokenizer


def bench_export(model, tokenizer, workdir, jit_compile, args):
    """Exports, reloads and times one export; returns its figures."""
    start = time.perf_counter()
    out_dir = export_translator(model, tokenizer, workdir / f"export-xla-{jit_compile}", jit_compile=jit_compile,
                                request=GenerationRequest(max_extra_length=EXTRA))
    export_s = time.perf_counter() - start
    size_mb = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file()) / 1e6
    start = time.perf_counter()
    artifact = SavedModelArtifact(out_dir, batch_size=max(args.batches))
    load_s = time.perf_counter() - start
    sentences = bench_sentences(tokenizer, max(args.batches))
    print(f"XLA {jit_compile}: export {export_s:.0f} s, {size_mb:.0f} MB, load {load_s:.1f} s", flush=True)
    rows = time_artifact(artifact, sentences, CONFIGS, args, format_row, xla=jit_compile)
    return {"xla": jit_compile, "export_s": export_s, "size_mb": size_mb, "load_s": load_s, "rows": rows}


def time_artifact(artifact, sentences, configs, args, format_row, **labels):
    """Rows of `measure_quietly` for each `(method, beam_size)` of `configs` and each batch of `args.batches`.

    `artifact.generate` translates the first `batch` sentences (any kind of `artifacts` artifact: a SavedModel, a
    CTranslate2 export); `labels` go into every row.
    """
    rows = []
    for method, beam_size in configs:
        request = artifact.request(beam_size=beam_size, alpha=0.6, max_extra_length=EXTRA)
        for batch in args.batches:
            repeats = args.repeats if batch == 1 else max(1, args.repeats // 3)
            result = measure_quietly(lambda b=batch, r=request: artifact.generate(sentences[:b], r), repeats,
                                     args.quiet_wait, args.max_other, args.retries)
            result.update(labels, method=method, batch=batch, repeats=repeats)
            rows.append(result)
            print(format_row(result), flush=True)
    return rows


HEADER = ("| XLA | method | batch | ms / sentence | ms / call | sentences/s | output tokens/s | first call s | runs "
          "| other cores |\n|---|---|---|---|---|---|---|---|---|---|")


def format_row(r):
    per_call = r["median_s"]
    return (f"| {'on' if r['xla'] else 'off'} | {r['method']} | {r['batch']} | {1000 * per_call / r['batch']:.1f} | "
            f"{1000 * per_call:.0f} | {r['batch'] / per_call:.1f} | {r['batch'] * OUTPUT_TOKENS / per_call:,.0f} | "
            f"{r['first_s']:.1f} | {r['repeats']} | {r['other_cores']:.2f} |")


def report(results, args):
    lines = [
        "# Translation SavedModel latency (`small`, random weights)", "",
        f"`python bench/bench_export.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d')}.", "",
        f"Inputs of {SOURCE_PIECES + 1} tokens (EOS included), outputs of {OUTPUT_TOKENS} tokens "
        f"(max_extra_length={EXTRA}); exports with max_beam_size=8, called through "
        "`SavedModelArtifact.generate` (strings in and out). Median of the timed runs. \"first call\": the "
        "untimed call before them, which prepares the chosen search and, with XLA, compiles it for that input "
        "shape (every new batch size, width or max_extra_length compiles again).", "",
        "| XLA | export s | export MB | load s |", "|---|---|---|---|",
    ]
    lines += [f"| {'on' if r['xla'] else 'off'} | {r['export_s']:.0f} | {r['size_mb']:.0f} | {r['load_s']:.1f} |"
              for r in results]
    lines += ["", HEADER] + [format_row(row) for r in results for row in r["rows"]]
    lines += ["", "## Machine", "", machine_description(f"TensorFlow {tf.__version__}"), ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--xla", choices=["off", "on", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=9, help="timed calls at batch 1 (a third at larger batches)")
    timing.add_arguments(parser, quiet_wait=300.0, max_other=0.2)
    parser.add_argument("--output", help="write the markdown report here")
    args = parser.parse_args(argv)
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.xla]
    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = prepare(pathlib.Path(tmp))
        results = [bench_export(model, tokenizer, pathlib.Path(tmp), jit, args) for jit in modes]
    timing.publish(report(results, args), args.output)


if __name__ == "__main__":
    main()
