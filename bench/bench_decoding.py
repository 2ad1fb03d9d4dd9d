"""Decoding throughput: cached vs uncached greedy and beam-4 search at the `small` size.

    python bench/bench_decoding.py                       # prints a markdown table
    python bench/bench_decoding.py --output bench/results/decoding.md

Model: d_model 256, 3+3 layers, d_ff 1024, 4 heads, vocab 8000, random weights.
Sources: 32 random ids (EOS last), no padding. Every sentence generates exactly
32 tokens (`min_length` = `max_length` = 32, so EOS never ends a search).
Throughput is output tokens per second: batch x 32 / time (for beam search,
the tokens of the returned best hypothesis; the search extends 4 per step).

Implementations:

* `cached-xla`: `greedy_decode` / `beam_search`, key/value cache, the whole
  search in one `tf.function(jit_compile=True)`.
* `uncached-xla`: the same search code over a model adapter that keeps the
  prefix instead of keys/values and re-runs the decoder stack on the whole
  (fixed-size, 32-slot) prefix buffer every step, projecting only the current
  position; also one XLA-compiled function.
* `reference-eager`: `reference_greedy` / `reference_beam_search`, eager,
  decoder re-run on the growing prefix, beam search one sentence at a time.

Each configuration waits for a quiet machine, runs once untimed (compilation),
then `--repeats` timed runs (1 for the reference) and reports the median. It
records the cores other processes used meanwhile, and measures again (up to
`--retries` times) when that exceeds `--max-other`.
"""

import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import timing  # noqa: E402
from timing import machine_description, measure_quietly  # noqa: E402

from t2t_keras.decoding import beam_search, greedy_decode  # noqa: E402
from t2t_keras.decoding.common import write_at  # noqa: E402

sys.path.insert(1, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root, for the tests' oracle
from tests.reference_search import reference_beam_search, reference_greedy  # noqa: E402
from t2t_keras.model import StepOutput, Transformer  # noqa: E402
from t2t_keras.special_ids import EOS_ID  # noqa: E402

SMALL = dict(vocab_size=8000, hidden_dim=256, num_layers=3, num_heads=4, intermediate_dim=1024, dropout=0.0)
LENGTH = 32  # source length and number of generated tokens
IMPLEMENTATIONS = ("cached-xla", "uncached-xla", "reference-eager")


class PrefixRecomputeModel:
    """Uncached decoding behind the cache interface that `greedy_decode` and `beam_search` use.

    Its "cache" holds the decoder input ids and the encoder output; every
    step writes the new token and re-runs the decoder stack on all slots
    (the causal mask hides the empty ones), then projects position `step`.
    """

    def __init__(self, model):
        self.model = model
        self.max_length = model.max_length
        self.pad_id = model.pad_id

    def source_mask(self, source):
        return self.model.source_mask(source)

    def encode(self, source, training=False):
        return self.model.encode(source, training=training)

    def init_cache(self, memory, max_length):
        prefix = tf.zeros((tf.shape(memory)[0], max_length), tf.int32)
        return [{"self": {"prefix": prefix}, "cross": {"memory": memory}}]

    def decode_step(self, tokens, cache, step, source_mask=None, training=False):
        model, layer = self.model, cache[0]
        prefix = write_at(layer["self"]["prefix"], step, tokens[:, 0])
        embedded = model.target_position(model.target_embedding(prefix))
        hidden = model.decoder(embedded, layer["cross"]["memory"], source_mask, training=training).output
        logits = model.project(hidden[:, step][:, None])  # (batch, 1, vocab)
        return StepOutput(logits, [{"self": {"prefix": prefix}, "cross": layer["cross"]}], [])


def build_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = Transformer(**SMALL)
    model.build()
    return model


def random_source(batch, seed=1):
    source = np.random.default_rng(seed).integers(4, SMALL["vocab_size"], size=(batch, LENGTH)).astype("int32")
    source[:, -1] = EOS_ID
    return source


def make_decoder(model, implementation, method):
    """`source -> (batch, LENGTH)` best output ids, for one implementation and method."""
    fixed = dict(max_extra_length=LENGTH, max_length=LENGTH, min_length=LENGTH)
    if implementation == "reference-eager":
        if method == "greedy":
            return lambda source: reference_greedy(model, source, **fixed)["tokens"]
        return lambda source: reference_beam_search(model, source, beam_size=4, **fixed)["tokens"][:, 0]
    searched = model if implementation == "cached-xla" else PrefixRecomputeModel(model)
    if method == "greedy":
        search = tf.function(lambda source: greedy_decode(searched, source, **fixed)["tokens"], jit_compile=True)
    else:
        search = tf.function(lambda source: beam_search(searched, source, beam_size=4, **fixed)["tokens"][:, 0],
                             jit_compile=True)
    return lambda source: search(tf.constant(source)).numpy()


def run(args):
    model = build_model()
    rows, outputs = [], {}
    for method in args.methods:
        for batch in args.batches:
            source = random_source(batch)
            for implementation in args.implementations:
                decode = make_decoder(model, implementation, method)
                repeats = 1 if implementation == "reference-eager" else args.repeats
                result = measure_quietly(lambda: decode(source), repeats, args.quiet_wait, args.max_other,
                                         args.retries)
                result["tokens"] = result.pop("value")
                reference = outputs.setdefault((method, batch), result["tokens"])
                result["agree"] = float(np.mean(result["tokens"] == reference))
                result.update(method=method, batch=batch, implementation=implementation, repeats=repeats)
                rows.append(result)
                print(format_row(result), flush=True)
    return rows


def format_row(r):
    tokens_per_s = r["batch"] * LENGTH / r["median_s"]
    return (f"| {r['method']} | {r['batch']} | {r['implementation']} | {tokens_per_s:,.0f} | "
            f"{1000 * r['median_s'] / LENGTH:.1f} | {r['first_s']:.1f} | {r['repeats']} | {r['agree']:.3f} | "
            f"{r['other_cores']:.2f} |")


HEADER = ("| method | batch | implementation | output tokens/s | ms/step | first call s | runs | agree "
          "| other cores |\n|---|---|---|---|---|---|---|---|---|")


def speedups(rows):
    """Lines giving cached-xla's speed-up over each uncached implementation."""
    times = {(r["method"], r["batch"], r["implementation"]): r["median_s"] for r in rows}
    lines = []
    for (method, batch, implementation), seconds in times.items():
        cached = times.get((method, batch, "cached-xla"))
        if cached and implementation != "cached-xla":
            ratio = seconds / cached
            lines.append(f"* {method}, batch {batch}: cached-xla is {ratio:.1f}x faster than {implementation}")
    return lines


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=["greedy", "beam4"], choices=["greedy", "beam4"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--implementations", nargs="+", default=list(IMPLEMENTATIONS), choices=IMPLEMENTATIONS)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the compiled implementations")
    timing.add_arguments(parser)
    parser.add_argument("--output", help="also write the results as markdown to this file")
    return parser.parse_args()


def main():
    args = parse_args()
    print(HEADER, flush=True)
    rows = run(args)
    summary = "\n".join(speedups(rows))
    print(summary)
    if args.output:
        machine = machine_description(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(f"# Decoding throughput ({time.strftime('%Y-%m-%d')})\n\n{__doc__.split(chr(10) + chr(10), 1)[1]}\n"
                    f"## Machine\n\n{machine}\n\n## Results\n\n{HEADER}\n"
                    + "\n".join(format_row(r) for r in rows) + f"\n\n{summary}\n")


if __name__ == "__main__":
    main()
