"""Training and decoding speed of the Transformer on Keras' TensorFlow and JAX backends, on this machine.

    python bench/bench_backends.py                  # small and base; writes bench/results/backends.md and .json
    python bench/bench_backends.py --quick --output /tmp/backends   # tiny, a few steps: checks that it runs

Each (backend, size) runs in a fresh process (Keras picks its backend once per process), one after another, each
after waiting for a quiet machine (`timing.wait_for_quiet`):

- TensorFlow trains as `t2t-keras train` does: the trainer's own `compile_model` (FusedAdam on the eq. (3)
  schedule, the fused label-smoothed loss, the metrics) with the precision, XLA and fusion the fast path picks for
  this hardware (`fast_path.py`). It decodes as a run's `Generator` does: `greedy_decode` / `beam_search` in one
  `tf.while_loop`, compiled with XLA for float32 weights, one concurrent search per core for a batch.
- JAX trains the same model, loss, schedule, optimizer and metrics with `model.fit` under `jax.jit`, in float32,
  and, where the TensorFlow fast path chose another precision, in that one too. It decodes with the
  greedy and beam searches (`decoding/greedy.py`, `decoding/beams.py`) compiled with `jax.jit`.

Training batches are synthetic and identical on both backends: `--source-length` + `--target-length` tokens per
pair, no padding, as many pairs as the size's `data.batch_tokens` holds; tokens/s counts target tokens, timed
from the step after `--warmup-steps` (compilation excluded). Decoding writes exactly `--gen-length` tokens per
sentence (min_length = max_length) for batch 1 and 32, greedy and beam 4, from an untrained model (the speed does
not depend on the weights when the length is fixed); the median of `--repeats` calls after one untimed call.

On a machine with a GPU and JAX built for CUDA (no TensorFlow needed), `--backends jax` measures JAX alone there:

    python bench/bench_backends.py --backends jax --sizes base --jax-precisions float32 mixed_bfloat16 \
        --peak-tflops float32=494.7 mixed_bfloat16=989.4 --output OUT/backends-gpu

Model FLOPs utilisation (MFU) is the model's training FLOPs per second over the peak the hardware lists for the
precision (`--peak-tflops`; the H100/H200 SXM figures above are dense TF32, which JAX uses for float32 matrix
products on such GPUs by default, and dense bfloat16). The model's FLOPs are those of its matrix products
(`training_flops_per_pair`): projections, attention scores and weighted sums (causal attention counted in full, as
PaLM's MFU does), the feed-forward networks and the output projection, forward once and backward twice.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from timing import busy_cores_seconds, measure, table_report, wait_for_quiet  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
DECODE_BATCHES = (1, 32)
SEARCHES = ("greedy", "beam4")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "base"], help="config presets to measure")
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"], choices=["tensorflow", "jax"])
    parser.add_argument("--jax-precisions", nargs="+",
                        help="JAX's precisions (default: float32 and the TensorFlow fast path's choice)")
    parser.add_argument("--peak-tflops", nargs="+", default=[], metavar="PRECISION=TFLOPS",
                        help="the hardware's peak for a precision, e.g. mixed_bfloat16=989.4: adds MFU")
    parser.add_argument("--quick", action="store_true", help="tiny preset, few steps: a check that it runs")
    parser.add_argument("--train-steps", type=int, default=12, help="timed training steps")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (compilation)")
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--target-length", type=int, default=32)
    parser.add_argument("--gen-length", type=int, default=32, help="tokens each decoded sentence gets")
    parser.add_argument("--max-batch-tokens", type=int,
                        help="cap on the training batch's target tokens (base's 25,000 take ~24 GB on TensorFlow)")
    parser.add_argument("--repeats", type=int, default=5, help="timed decoding calls")
    parser.add_argument("--quiet-wait", type=float, default=float(os.environ.get("QUIET_WAIT", 600)))
    parser.add_argument("--output", default=str(RESULTS / "backends"), help="writes OUTPUT.md and OUTPUT.json")
    parser.add_argument("--child", nargs=3, metavar=("BACKEND", "SIZE", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.train_steps, args.warmup_steps, args.repeats = ["tiny"], 3, 2, 2
        args.quiet_wait = min(args.quiet_wait, 5.0)
        args.source_length = args.target_length = args.gen_length = 8
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args, *args.child)))
        return
    runs = []
    for size in args.sizes:
        precisions = ["float32"]
        if "tensorflow" in args.backends:
            runs.append(run_in_process(args, "tensorflow", size, "auto"))
            precisions.append(runs[-1]["training"]["precision"])  # JAX in the fast path's precision too
        if "jax" in args.backends:
            for precision in dict.fromkeys(args.jax_precisions or precisions):
                runs.append(run_in_process(args, "jax", size, precision, decode=precision == "float32"))
    peaks = dict(item.split("=") for item in args.peak_tflops)
    for run in runs:
        training = run["training"]
        training["model_tflops_per_s"] = round(training["flops_per_pair"] * training["pairs_per_s"] / 1e12, 2)
        if training["precision"] in peaks:
            training["mfu"] = round(training["model_tflops_per_s"] / float(peaks[training["precision"]]), 4)
    record = {"date": time.strftime("%Y-%m-%d"), "quick": args.quick, "settings": settings(args),
              "peak_tflops": peaks, "runs": runs}
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.output + ".json").write_text(json.dumps(record, indent=1) + "\n")
    text = report(record)
    pathlib.Path(args.output + ".md").write_text(text)
    print(text)


def settings(args):
    return {name: getattr(args, name) for name in ("train_steps", "warmup_steps", "source_length", "target_length",
                                                    "gen_length", "repeats", "max_batch_tokens")}


def run_in_process(args, backend, size, precision, decode=True):
    """One (backend, size, precision) in a fresh process on a quiet machine; its results and the other cores used."""
    quiet = wait_for_quiet(max_wait=args.quiet_wait)
    command = [sys.executable, __file__, "--child", backend, size, precision, *child_flags(args, decode)]
    env = dict(os.environ, KERAS_BACKEND=backend)
    before, start = busy_cores_seconds(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"{backend} {size} failed:\n{done.stderr[-4000:]}")
    wall = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return dict(result, size=size, quiet_before=quiet, busy_cores=round((busy_cores_seconds() - before) / wall, 2))


def child_flags(args, decode):
    flags = ["--train-steps", str(args.train_steps), "--warmup-steps", str(args.warmup_steps), "--source-length",
             str(args.source_length), "--target-length", str(args.target_length), "--gen-length",
             str(args.gen_length), "--repeats", str(0 if not decode else args.repeats)]
    if args.max_batch_tokens:
        flags += ["--max-batch-tokens", str(args.max_batch_tokens)]
    return flags + (["--quick"] if args.quick else [])


def run_child(args, backend, size, precision):
    """Training and (unless `--repeats 0`) decoding speed on this process's backend."""
    import keras

    from t2t_keras.config import load_config

    assert keras.backend.backend() == backend, (keras.backend.backend(), backend)
    config = load_config(size)
    if backend == "tensorflow":
        model, searches, chosen = tensorflow_model(config)
    else:
        model, searches, chosen = jax_model(config, precision)
    result = {"backend": backend, "keras": keras.__version__, "versions": versions(backend),
              "params": model.count_params(), "training": dict(chosen, **train_speed(model, config, args))}
    if args.repeats:
        result["decoding"] = decode_speed(searches, config, args)
    return result


def versions(backend):
    if backend == "tensorflow":
        import tensorflow as tf

        return f"TensorFlow {tf.__version__}"
    import jax

    device = jax.devices()[0]
    kind = f" ({device.device_kind})" if device.platform != "cpu" else ""
    return f"JAX {jax.__version__} on {device.platform.upper()}{kind}"


def tensorflow_model(config):
    """The model `t2t-keras train` compiles for this hardware, and the searches a run's `Generator` runs."""
    import tensorflow as tf

    from t2t_keras.decoding import beam_search, greedy_decode
    from t2t_keras.decoding.sharding import choose_shards, compiled_search
    from t2t_keras.fast_path import FastPath
    from t2t_keras.switches.clustering import set_auto_clustering
    from t2t_keras.training.trainer import compile_model

    model = compile_model(config, tf.distribute.get_strategy())
    chosen = {"precision": model.dtype_policy.name, "jit_compile": bool(model.jit_compile),
              "fused_elementwise": model.fuse_elementwise}
    set_auto_clustering(model.fuse_elementwise)  # on for this process, as `train` has it
    decoded = model
    if model.dtype_policy.name != "float32":  # decoding uses float32 weights (the Generator's default)
        from t2t_keras.model import Transformer

        decoded = Transformer.from_config(dict(model.get_config(), dtype="float32"))
        decoded.build()
        decoded.set_weights(model.get_weights())

    def make(search, **options):
        compiled = compiled_search(lambda source: search(decoded, source, **options)["tokens"],
                                   FastPath.detect().decoding_jit("float32"), choose_shards("auto"))
        return lambda source: compiled(tf.constant(source, tf.int32)).numpy()

    searches = {"greedy": lambda **fixed: make(greedy_decode, **fixed),
                "beam4": lambda **fixed: make(beam_search, beam_size=4, **fixed)}
    return model, searches, chosen


def jax_model(config, precision):
    """The same model, loss, schedule, optimizer and metrics, `model.fit` under `jax.jit`; the searches."""
    import keras
    import numpy as np

    from t2t_keras.decoding.beams import beam_search
    from t2t_keras.decoding.greedy import greedy_decode
    from t2t_keras.decoding.jit import compiled
    from t2t_keras.model import build_transformer
    from t2t_keras.training.loss import LabelSmoothedCrossEntropy
    from t2t_keras.training.metrics import MaskedAccuracy, Perplexity, TokenCount
    from t2t_keras.training.schedule import make_optimizer

    t = config.training
    model = build_transformer(config.model, dtype=precision)
    model.build()
    model.compile(make_optimizer(config.model.hidden_dim, t.warmup_steps, t.learning_rate_scale),
                  loss=LabelSmoothedCrossEntropy(epsilon=t.label_smoothing),
                  metrics=[MaskedAccuracy(), Perplexity(), TokenCount()], jit_compile=True)

    def make(search, **options):
        program = compiled(model, search, **options)
        return lambda source: np.asarray(keras.ops.convert_to_numpy(program(source)["tokens"]))

    searches = {"greedy": lambda **fixed: make(greedy_decode, **fixed),
                "beam4": lambda **fixed: make(beam_search, beam_size=4, **fixed)}
    return model, searches, {"precision": precision, "jit_compile": True, "fused_elementwise": False}


def synthetic_pairs(rows, source_length, target_length, vocab_size, seed=0):
    """Random ids (no padding, no special ids) for `rows` pairs: source, target_in, target_out."""
    import numpy as np

    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, size=(rows, source_length)).astype("int32")
    target = rng.integers(4, vocab_size, size=(rows, target_length + 1)).astype("int32")
    return source, target[:, :-1], target[:, 1:]


def train_speed(model, config, args):
    """Target tokens/s of `model.fit` over the timed steps, after the warmup steps."""
    import keras

    batch_tokens = min(config.data.batch_tokens, args.max_batch_tokens or config.data.batch_tokens)
    rows = max(1, batch_tokens // max(args.source_length, args.target_length))
    steps = args.warmup_steps + args.train_steps
    source, target_in, target_out = synthetic_pairs(rows * steps, args.source_length, args.target_length,
                                                    config.model.vocab_size)
    stamps = []
    clock = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: stamps.append(time.perf_counter()))
    start = time.perf_counter()
    history = model.fit((source, target_in), target_out, batch_size=rows, epochs=1, shuffle=False, verbose=0,
                        callbacks=[clock])
    seconds = stamps[-1] - stamps[args.warmup_steps - 1]
    return {"batch_pairs": rows, "target_tokens_per_s": round(rows * args.target_length * args.train_steps / seconds),
            "pairs_per_s": rows * args.train_steps / seconds,
            "flops_per_pair": training_flops_per_pair(config.model, args.source_length, args.target_length),
            "first_steps_s": round(stamps[args.warmup_steps - 1] - start, 2),  # compilation included
            "final_loss": history.history["loss"][-1]}


def training_flops_per_pair(model, source_length, target_length):
    """FLOPs of one training pair's matrix products: 3x the forward pass (backward = 2x forward), 2 FLOPs a MAC."""
    d, ff, vocab = model.hidden_dim, model.intermediate_dim, model.vocab_size
    keys, values = model.num_heads * model.head_key_dim, model.num_heads * model.head_value_dim
    s, t = source_length, target_length

    def attention(queries, memory):  # projections of queries and memory, scores, weighted sums, output
        return queries * d * keys + memory * d * (keys + values) + queries * memory * (keys + values) + \
            queries * values * d

    encoder = attention(s, s) + 2 * s * d * ff
    decoder = attention(t, t) + attention(t, s) + 2 * t * d * ff
    macs = model.num_layers * encoder + model.decoder_layers * decoder + t * d * vocab
    return 3 * 2 * macs


def decode_speed(searches, config, args):
    """Sentences/s and tokens/s of each search at batch 1 and 32, `--gen-length` tokens per sentence."""
    fixed = dict(max_extra_length=args.gen_length, max_length=args.gen_length, min_length=args.gen_length)
    results = {}
    for name in SEARCHES:
        search = searches[name](**fixed)
        for batch in DECODE_BATCHES:
            source, _, _ = synthetic_pairs(batch, args.source_length, 1, config.model.vocab_size, seed=batch)
            source[:, -1] = 3  # EOS ends each source sentence
            timed = measure(lambda: search(source), args.repeats)
            results[f"{name}_batch{batch}"] = {"median_s": timed["median_s"], "first_s": timed["first_s"],
                                               "sentences_per_s": batch / timed["median_s"],
                                               "tokens_per_s": batch * args.gen_length / timed["median_s"],
                                               "other_cores": timed["other_cores"]}
    return results


def mfu(training):
    return f"{training['mfu']:.1%}" if "mfu" in training else "—"


def report(record):
    """The markdown tables: training tokens/s, then decoding, per size and backend."""
    runs = record["runs"]
    training = [f"| {r['size']} | {r['backend']} | {r['training']['precision']} | "
                f"{'XLA' if r['training']['jit_compile'] else 'graph'}"
                f"{' + fused elementwise' if r['training']['fused_elementwise'] else ''} | "
                f"{r['training']['batch_pairs']} | {r['training']['target_tokens_per_s']:,} | "
                f"{r['training']['first_steps_s']} | {r['training'].get('model_tflops_per_s', '')} | "
                f"{mfu(r['training'])} | {r['busy_cores']} |" for r in runs]
    decoding = [f"| {r['size']} | {r['backend']} | {name} | {batch} | {d['sentences_per_s']:.2f} | "
                f"{d['tokens_per_s']:.0f} | {d['first_s']:.1f} |"
                for r in runs if "decoding" in r for name in SEARCHES for batch in DECODE_BATCHES
                for d in [r["decoding"][f"{name}_batch{batch}"]]]
    header = ("| size | backend | precision | compiled | pairs/batch | target tokens/s | first steps (s) "
              "| model TFLOP/s | MFU | busy cores |\n|---|---|---|---|---|---|---|---|---|---|")
    prose = (f"{'QUICK CHECK (tiny preset, few steps): not a measurement. ' if record['quick'] else ''}"
             f"Measured {record['date']} with bench/bench_backends.py, settings {json.dumps(record['settings'])}; "
             "each row a fresh process after waiting for a quiet machine ('busy cores': all cores busy during it, "
             "this run's own included).")
    decoding_table = ["", "Decoding (float32 weights, exactly gen_length tokens per sentence; 'first': the untimed "
                      "first call, compilation included):", "",
                      "| size | backend | search | batch | sentences/s | tokens/s | first (s) |",
                      "|---|---|---|---|---|---|---|", *decoding]
    versions = ", ".join(sorted({r["versions"] for r in runs})) + f", Keras {runs[0]['keras']}"
    return table_report("# The Transformer on TensorFlow and JAX", prose, header, training + decoding_table, versions)


if __name__ == "__main__":
    main()
