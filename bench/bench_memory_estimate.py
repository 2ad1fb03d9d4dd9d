"""A training step's memory estimate (t2t_keras/memory.py) against the peak RSS measured.

    python bench/bench_memory_estimate.py --out bench/results/memory-estimate.json [--cases mini-f32 base-4096]

Each case runs in a fresh process: the preset's model, optimizer, loss and divergence guard compiled as `train`
compiles them (its precision, XLA and fusion choices on this machine), then `--steps` updates on a batch of the
largest bucket (data.batch_tokens // data.max_length sequences of data.max_length tokens, random ids), and the
process' peak RSS (`ru_maxrss`) is compared with the estimate of that step. Not counted: the corpus and its input
pipeline (the estimate's `runtime` part covers them in `train`). The table goes to docs/results.md
("A model too big for memory"), with the machine.
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# name -> (preset, precision, overrides)
CASES = {
    "mini-f32": ("mini", "float32", []),
    "mini-bf16": ("mini", "mixed_bfloat16", []),
    "small-f32": ("small", "float32", []),
    "small-bf16": ("small", "mixed_bfloat16", []),
    "base-4096": ("base", "float32", ["data.batch_tokens=4096"]),
    "base-8192": ("base", "float32", ["data.batch_tokens=8192"]),
    "base-8192-bf16": ("base", "mixed_bfloat16", ["data.batch_tokens=8192"]),
}


def child(name, steps):
    """One case in this process: prints `{case, peak_bytes, compiled_bytes, estimate}` as JSON."""
    import tensorflow as tf

    from t2t_keras.config import load_config, replace
    from t2t_keras.training.guard import DivergenceGuard
    from t2t_keras.training.memory_fit import largest_batch_rows, plan_memory
    from t2t_keras.training.precision import choose_fusion, choose_jit
    from t2t_keras.training.strategy import make_strategy
    from t2t_keras.training.trainer import compile_model

    preset, precision, overrides = CASES[name]
    config = load_config(preset, overrides + [f"training.mixed_precision={precision}"])
    t = config.training
    jit = choose_jit(t.jit_compile, precision)
    config = replace(config, training={"jit_compile": jit, "fuse_elementwise": choose_fusion(t.fuse_elementwise,
                                                                                             precision, jit)})
    strategy = make_strategy("auto")
    plan = plan_memory(config, strategy.num_replicas_in_sync)
    model = compile_model(config, strategy, DivergenceGuard.create(strategy, config.training))
    compiled = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rows, length, vocab = largest_batch_rows(config, 1), config.data.max_length, config.model.vocab_size
    ids = tf.random.stateless_uniform((rows, length), (1, 2), 4, vocab, tf.int32)
    batch = ((ids, ids), ids, tf.ones((rows, length)))
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(), steps_per_epoch=steps, epochs=1, verbose=0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"case": name, "preset": preset, "precision": precision, "jit_compile": jit, "rows": rows,
                      "length": length, "peak_bytes": peak, "compiled_bytes": compiled,
                      "estimate_bytes": plan.unsplit.total, "parts": plan.unsplit.parts}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.steps)
    results = []
    for name in args.cases:
        completed = subprocess.run([sys.executable, __file__, "--out", args.out, "--child", name, "--steps",
                                    str(args.steps)], capture_output=True, text=True)
        if completed.returncode != 0:
            print(completed.stderr[-3000:], file=sys.stderr)
            continue
        result = json.loads(completed.stdout.strip().splitlines()[-1])
        result["estimate_over_measured"] = round(result["estimate_bytes"] / result["peak_bytes"], 3)
        print(json.dumps({k: v for k, v in result.items() if k != "parts"}), flush=True)
        results.append(result)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")),
                      platform.processor())
    pathlib.Path(args.out).write_text(json.dumps({"machine": model_name, "cores": os.cpu_count(), "results": results},
                                                 indent=1) + "\n")


if __name__ == "__main__":
    main()
