"""Greedy cached decoding with and without an XLA option, alternating in fresh processes.

    PYTHONPATH=bench:../shared/bench-peers python bench/decode_xla_flags.py \
        --flags=--xla_cpu_use_thunk_runtime=false --repeats 2 --output bench/results/xla-flags.md

`XLA_FLAGS` is read once per process, so every measurement runs in a process of its own: for each repetition and
each point (size, batch, Keras dtype policy), one process with the default options and one with `--flags`, one
after the other. Each process builds the model as the peer harness's adapter does (`build_for_bench`, XLA on),
decodes 32 random source ids of its batch for exactly 32 tokens once to compile, then times 7 searches; the figure is
the median. The generated ids must be the same with and without the option (checked; a difference is an error).
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys

POINTS = (("base", 1, "mixed_bfloat16"), ("base", 1, "float32"), ("small", 1, "float32"),
          ("small", 32, "mixed_bfloat16"), ("base", 32, "float32"))


def measure(size, batch, policy):
    """One point in this process: {"tokens_per_second", "ids_sum"}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bench_common as bc  # the peer harness: ../shared/bench-peers on PYTHONPATH
    import keras
    import numpy as np
    import t2t_keras_adapter
    from timing import measure as time_calls

    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    bench = t2t_keras_adapter.build_for_bench(bc.SIZES[size], jit=True, dropout=0.1, src_len=32, tgt_len=32)
    generate = bench.make_generate("cached", 32)
    source = np.random.default_rng(0).integers(4, bc.SIZES[size]["vocab"], size=(batch, 32)).astype("int32")
    source[:, -1] = 2
    result = time_calls(lambda: np.asarray(generate(source)), repeats=7)
    return {"tokens_per_second": batch * 32 / result["median_s"], "ids_sum": int(result["value"].sum())}


def run_point(size, batch, policy, flags):
    env = dict(os.environ, XLA_FLAGS=flags)
    result = subprocess.run([sys.executable, __file__, "--child", size, str(batch), policy], env=env,
                            capture_output=True, text=True, timeout=900)
    if result.returncode:
        raise RuntimeError(f"{size} b{batch} {policy} XLA_FLAGS={flags!r} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flags", default="--xla_cpu_use_thunk_runtime=false",
                        help="the XLA option(s) to compare with the defaults (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=pathlib.Path, help="markdown table; a .csv is written beside it")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        size, batch, policy = args.child
        print(json.dumps(measure(size, int(batch), policy)))
        return
    rows = []
    for repeat in range(args.repeats):
        for size, batch, policy in POINTS:
            default = run_point(size, batch, policy, "")
            flagged = run_point(size, batch, policy, args.flags)
            if default["ids_sum"] != flagged["ids_sum"]:
                raise RuntimeError(f"{size} b{batch} {policy}: the option changed the generated ids")
            rows.append((size, batch, policy, repeat + 1, default["tokens_per_second"],
                         flagged["tokens_per_second"]))
            print(f"{size} b{batch} {policy} run {repeat + 1}: {rows[-1][4]:,.0f} -> {rows[-1][5]:,.0f} tok/s "
                  f"({rows[-1][5] / rows[-1][4]:.2f}x)", flush=True)
    lines = [f"### Greedy cached decoding, default XLA options against `XLA_FLAGS={args.flags}` "
             f"({platform.machine()}, {os.cpu_count()} cores, {datetime.date.today()})", "",
             "| size | batch | policy | run | default tok/s | with the option | ratio |",
             "|---|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {s} | {b} | {p} | {r} | {d:,.0f} | {f:,.0f} | {f / d:.2f} |" for s, b, p, r, d, f in rows]
    ratios = [f / d for *_, d, f in rows]
    lines += ["", f"Ratio over all runs: median {statistics.median(ratios):.2f}, range "
              f"{min(ratios):.2f}–{max(ratios):.2f}. The generated ids were the same in every pair."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
        csv = ["size,batch,policy,run,default_tokens_per_second,option_tokens_per_second"]
        csv += [f"{s},{b},{p},{r},{d:.1f},{f:.1f}" for s, b, p, r, d, f in rows]
        args.output.with_suffix(".csv").write_text("\n".join(csv) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
