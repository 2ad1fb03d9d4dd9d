"""Where a greedy cached decoding step's time goes, measured part by part at the peer harness's sizes.

    PYTHONPATH=bench:../shared/bench-peers python bench/profile_decoding.py --size small --batch 32 \
        --output bench/results/profile.md

The whole search runs in one XLA-compiled loop, which a profiler trace cannot split by op. So each part of a step
runs on its own, in its own XLA-compiled 32-iteration loop with the same shapes as in the search, and is timed:

- the encoder (once per search);
- the decoder stack's cached step (embedding, the self-attention cache write, cross-attention, feed-forward);
- the output projection to the vocabulary, its log-softmax and the argmax;
- the whole search (`greedy_decode`, 32 generated tokens), for the overhead: what the loop adds on top of its parts
  (token bookkeeping, masks, the cache carried through the loop).

`--kernels` times, instead, only the matrix products of one decoder step (per layer: the fused query/key/value
projection, the self-attention output, the cross-attention query and output, the two feed-forward products; then the
vocabulary projection) chained as in the step, 32 steps in one loop, with each kernel this machine offers: XLA and
TensorFlow's graph-mode (oneDNN) kernels, in float32 and in bfloat16 weights and activations. It is the floor under
a step that computes those products with that kernel and nothing else.

Model: random weights built as the harness's adapter builds them (`t2t_keras_adapter.build_for_bench`), source 32
random ids, exactly 32 generated tokens. Median of `--repeats` timed runs after one untimed (compiling) run.
"""

import argparse
import datetime
import os
import pathlib
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_common as bc  # noqa: E402  (the peer harness: ../shared/bench-peers on PYTHONPATH)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import t2t_keras_adapter  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_keras.decoding import greedy_decode  # noqa: E402

LENGTH = 32


def timed(function, *args, repeats):
    function(*args)  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(*args)
        tf.nest.map_structure(lambda t: t.numpy(), result)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def parts(model, batch, repeats):
    """Seconds for one search and for each of its parts, over `LENGTH` steps."""
    rng = np.random.default_rng(0)
    source = rng.integers(4, model.vocab_size, size=(batch, LENGTH)).astype("int32")
    source[:, -1] = 2  # EOS last, no padding
    source = tf.constant(source)
    fixed = dict(max_extra_length=LENGTH, max_length=LENGTH, min_length=LENGTH)

    search = tf.function(lambda s: greedy_decode(model, s, **fixed)["tokens"], jit_compile=True)
    encoder = tf.function(lambda s: model.encode(s, training=False), jit_compile=True)
    memory = encoder(source)
    mask = model.source_mask(source)

    @tf.function(jit_compile=True)
    def decoder_steps(memory):
        cache = model.init_cache(memory, LENGTH)
        tokens = tf.fill([batch, 1], 5)

        def body(step, hidden, cache):
            x = model._embed(tokens, model.target_embedding, model.target_position, step, False)
            out, _, _, cache = model.decoder.decode_step(x, cache, step, mask, training=False)
            return step + 1, hidden + tf.cast(out[:, 0], tf.float32), cache

        hidden = tf.zeros([batch, model.hidden_dim], tf.float32)
        return tf.while_loop(lambda step, *_: step < LENGTH, body, (tf.constant(0), hidden, cache))[1]

    @tf.function(jit_compile=True)
    def projection_steps(hidden):
        def body(step, hidden, tokens):
            log_probs = tf.nn.log_softmax(model.project(tf.cast(hidden, model.compute_dtype)[:, None])[:, 0])
            token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
            return step + 1, hidden + tf.cast(token[:, None], tf.float32) * 1e-6, tokens + token

        return tf.while_loop(lambda step, *_: step < LENGTH, body,
                             (tf.constant(0), hidden, tf.zeros([batch], tf.int32)))[2]

    hidden = tf.random.normal([batch, model.hidden_dim])
    result = {"whole search": timed(search, source, repeats=repeats),
              "encoder": timed(encoder, source, repeats=repeats),
              "decoder stack (cached steps)": timed(decoder_steps, memory, repeats=repeats),
              "projection, log-softmax, argmax": timed(projection_steps, hidden, repeats=repeats)}
    result["loop and bookkeeping (the rest)"] = max(
        result["whole search"] - sum(v for k, v in result.items() if k != "whole search"), 0.0)
    return result


KERNELS = {"XLA, float32": (True, tf.float32), "XLA, bfloat16": (True, tf.bfloat16),
           "graph mode (oneDNN), float32": (False, tf.float32), "graph mode (oneDNN), bfloat16": (False, tf.bfloat16)}


def kernel_floors(sizes, batch, repeats):
    """Seconds for 32 steps of one decoder step's matrix products alone, for each kernel in `KERNELS`."""
    d, ff, vocab, layers = sizes["d_model"], sizes["d_ff"], sizes["vocab"], sizes["n_dec"]
    shapes = [(d, 3 * d), (d, d), (d, d), (d, d), (d, ff), (ff, d)]
    rng = np.random.default_rng(0)

    def weight(rows, cols, dtype):
        return tf.Variable(tf.cast(rng.normal(0.0, rows ** -0.5, (rows, cols)).astype("float32"), dtype))

    result = {}
    for name, (jit, dtype) in KERNELS.items():
        stack = [[weight(r, c, dtype) for r, c in shapes] for _ in range(layers)]
        output = weight(d, vocab, dtype)

        def steps(x, stack=stack, output=output):
            # The logits leave each step as a loop variable: a reduction of them would let XLA fuse the
            # vocabulary product into it and compute it with a slow generic loop.
            def body(step, x, logits):
                h = x
                for qkv, self_out, cross_q, cross_out, ff_in, ff_out in stack:
                    h = tf.matmul(tf.reduce_sum(tf.reshape(tf.matmul(h, qkv), [batch, 3, d]), axis=1), self_out)
                    h = tf.matmul(tf.matmul(h, cross_q), cross_out)
                    h = tf.matmul(tf.nn.relu(tf.matmul(h, ff_in)), ff_out)
                return step + 1, h, tf.matmul(h, output)

            logits = tf.zeros([batch, vocab], dtype)
            return tf.while_loop(lambda step, *_: step < LENGTH, body, (tf.constant(0), x, logits))[2]

        x = tf.cast(tf.random.normal([batch, d]), dtype)
        result[name] = timed(tf.function(steps, jit_compile=jit), x, repeats=repeats)
    return result


def kernels_markdown(args, result):
    head = (f"### the matrix products of a decoder step alone, {args.size}, batch {args.batch} "
            f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, {datetime.date.today()})\n\n")
    rows = ["| kernel | ms a step (32 steps in one loop) | generated tokens/s at most |", "|---|---:|---:|"]
    for name, seconds in result.items():
        rows.append(f"| {name} | {1000 * seconds / LENGTH:.3f} | {args.batch * LENGTH / seconds:,.0f} |")
    return head + "\n".join(rows) + "\n"


def markdown(args, result):
    whole = result["whole search"]
    head = (f"### greedy cached decoding, {args.size}, {args.precision}, batch {args.batch}: "
            f"{1000 * whole / LENGTH:.2f} ms a step, {args.batch * LENGTH / whole:,.0f} generated tokens/s "
            f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, {datetime.date.today()})\n\n")
    rows = ["| part (32 steps) | ms a step | share of the search |", "|---|---:|---:|"]
    for name, seconds in result.items():
        if name != "whole search":
            rows.append(f"| {name} | {1000 * seconds / LENGTH:.3f} | {100 * seconds / whole:.0f}% |")
    return head + "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(bc.SIZES), default="small")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", action="store_true",
                        help="time only a decoder step's matrix products, with each kernel this machine offers")
    parser.add_argument("--output", type=pathlib.Path, help="append the markdown table to this file")
    args = parser.parse_args(argv)
    if args.kernels:
        text = kernels_markdown(args, kernel_floors(bc.SIZES[args.size], args.batch, args.repeats))
        print(text)
        if args.output:
            with args.output.open("a", encoding="utf-8") as out:
                out.write("\n" + text)
        return 0
    keras.utils.set_random_seed(0)
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = t2t_keras_adapter.build_for_bench(bc.SIZES[args.size], jit=True, dropout=bc.DROPOUT, src_len=LENGTH,
                                              tgt_len=LENGTH).keras_model
    text = markdown(args, parts(model, args.batch, args.repeats))
    print(text)
    if args.output:
        with args.output.open("a", encoding="utf-8") as out:
            out.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
