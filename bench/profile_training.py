"""Where a training step's time goes: a TensorFlow profiler trace of our model at the peer harness's sizes.

    PYTHONPATH=bench:../shared/bench-peers python bench/profile_training.py --size small --precision bf16 --jit 0 \
        --output bench/results/profile.md

The model, optimizer, loss and random batches are the peer harness's (`t2t_keras_adapter.build_for_bench`,
`tf_common.random_batch_data`), trained with `model.fit` as the harness does. After `--warmup` steps, `--steps`
steps run under `tf.profiler`; the host trace's op events are summed by exclusive (self) time into the categories
of a Transformer step: matmuls, attention softmax, LayerNorm, dropout, vocabulary projection and loss, optimizer
update, input pipeline, XLA-fused elementwise clusters (`training.fuse_elementwise`), other ops, and the core time
in which no op ran. The table (and the slowest ops) is printed and appended, with the machine, to `--output`.
`--baseline` profiles the step without the package's training levers (Keras' Adam and Dropout, no fused
elementwise ops), for a before/after comparison in the same session.

Under XLA (`--jit 1`) the step is one compiled cluster and the trace cannot split it; profile graph mode.
"""

import argparse
import collections
import datetime
import json
import os
import pathlib
import platform
import re
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_common as bc  # noqa: E402  (the peer harness: ../shared/bench-peers on PYTHONPATH)
import keras  # noqa: E402
import t2t_keras_adapter  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_common as tc  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from t2t_keras.layers.dropout import Dropout  # noqa: E402
from t2t_keras.training.loss import LabelSmoothedCrossEntropy  # noqa: E402
from t2t_keras.training.schedule import TransformerSchedule  # noqa: E402

CATEGORIES = ("input pipeline", "optimizer update", "vocabulary projection and loss", "dropout",
              "attention softmax", "LayerNorm", "matmuls", "XLA-fused elementwise clusters", "other ops",
              "no op running (host, idle)")
XLA_TYPES = re.compile(r"^_?Xla(Run|Compile|Launch|Merge)")
MATMUL_TYPES = re.compile(r"(MatMul|Einsum|Conv)", re.IGNORECASE)
SOFTMAX_TYPES = re.compile(r"(Softmax|Exp|Max|Sum|Sub|RealDiv|Mul|Neg)", re.IGNORECASE)
INPUT_TYPES = re.compile(r"(Iterator|Dataset|Prefetch)", re.IGNORECASE)
RANDOM_TYPES = re.compile(r"(Random|Philox|ThreeFry)", re.IGNORECASE)


def categorize(name, op_type):
    """The category of one TensorFlow op from its scoped name and type."""
    lower = name.lower()
    if XLA_TYPES.search(op_type):
        return "XLA-fused elementwise clusters"
    if INPUT_TYPES.search(op_type) or "iteratorgetnext" in lower:
        return "input pipeline"
    if re.search(r"(^|/)(adam|fused_adam|optimizer|loss_scale_optimizer)(_\d+)?/", lower) or "assignaddvariableop" in \
            op_type.lower() and "iteration" in lower:
        return "optimizer update"
    if re.search(r"(output_projection|logits|/loss|label_smooth|cross_entropy|compute_loss)", lower):
        return "vocabulary projection and loss"
    if "dropout" in lower or RANDOM_TYPES.search(op_type):
        return "dropout"
    if "attention" in lower and ("softmax" in lower or SOFTMAX_TYPES.fullmatch(op_type or "")) \
            and not MATMUL_TYPES.search(op_type):
        return "attention softmax"
    if re.search(r"(layer_norm|layernorm|norm_\d|/norm/)", lower):
        return "LayerNorm"
    if MATMUL_TYPES.search(op_type):
        return "matmuls"
    return "other ops"


def _stat_value(stat):
    for field in ("str_value", "int64_value", "uint64_value", "double_value"):
        if stat.HasField(field):
            return getattr(stat, field)
    return None


def op_events(xspace):
    """(line key, start_ps, end_ps, name, type) of every TensorFlow op event on the host's thread lines."""
    events = []
    for plane in xspace.planes:
        if not plane.name.startswith("/host:"):
            continue
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                meta = plane.event_metadata[event.metadata_id]
                stats = {stat_names.get(s.metadata_id): _stat_value(s) for s in list(meta.stats) + list(event.stats)}
                label = stats.get("tf_op") or meta.name
                if not isinstance(label, str) or ":" not in label:
                    continue
                name, _, op_type = label.rpartition(":")
                if not name or not op_type or "::" in label or " " in label or op_type == "EagerLocalExecute":
                    continue  # executor and eager bookkeeping ("KernelAndDeviceFunc::Run", "__inference_...")
                start = line.timestamp_ns * 1000 + event.offset_ps
                events.append(((plane.name, line.id), start, start + event.duration_ps, name, op_type))
    return events


def exclusive_times(events):
    """Each event's duration minus that of the events nested in it on the same thread line."""
    by_line = collections.defaultdict(list)
    for event in events:
        by_line[event[0]].append(event)
    result = []
    for line_events in by_line.values():
        line_events.sort(key=lambda e: (e[1], -e[2]))
        stack = []  # [event, child time]
        for event in line_events:
            while stack and stack[-1][0][2] <= event[1]:
                done, child = stack.pop()
                result.append((done, done[2] - done[1] - child))
            if stack:
                stack[-1][1] += event[2] - event[1]
            stack.append([event, 0])
        while stack:
            done, child = stack.pop()
            result.append((done, done[2] - done[1] - child))
    return result


def load_xspace(logdir):
    paths = sorted(pathlib.Path(logdir).rglob("*.xplane.pb"))
    if not paths:
        raise SystemExit(f"the profiler wrote no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(paths[-1].read_bytes())
    return space


def use_baseline():
    """The step before this package's training levers: Keras' Adam and Dropout, no XLA-fused elementwise ops."""
    os.environ["T2T_FUSE_ELEMENTWISE"] = "0"
    Dropout.call = keras.layers.Dropout.call


def profile(args):
    cfg = bc.SIZES[args.size]
    keras.utils.set_random_seed(0)
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    if args.baseline:
        use_baseline()
    built = t2t_keras_adapter.build_for_bench(cfg, jit=bool(args.jit), dropout=bc.DROPOUT, src_len=args.src_len,
                                              tgt_len=args.tgt_len)
    model = built.keras_model
    if args.baseline:
        model.compile(optimizer=keras.optimizers.Adam(TransformerSchedule(cfg["d_model"]), 0.9, 0.98, 1e-9),
                      loss=LabelSmoothedCrossEntropy(0.1), jit_compile=bool(args.jit))
    src, tin, tout = tc.random_batch_data(cfg, (args.warmup + args.steps) * args.batch, args.src_len, args.tgt_len)
    warm = slice(0, args.warmup * args.batch)
    model.fit([src[warm], tin[warm]], tout[warm], batch_size=args.batch, epochs=1, shuffle=False, verbose=0)
    rest = slice(args.warmup * args.batch, None)
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        model.fit([src[rest], tin[rest]], tout[rest], batch_size=args.batch, epochs=1, shuffle=False, verbose=0)
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        space = load_xspace(logdir)
    timed = exclusive_times(op_events(space))
    seconds = collections.Counter()
    ops = collections.Counter()
    for event, exclusive_ps in timed:
        category = categorize(event[3], event[4])
        seconds[category] += exclusive_ps / 1e12
        ops[f"{event[4]} {re.sub(r'_[0-9]+', '', event[3])[-70:]}"] += exclusive_ps / 1e12
    cores = os.cpu_count() or 1
    seconds["no op running (host, idle)"] = max(cores * wall - sum(seconds.values()), 0.0)
    return {"size": args.size, "precision": args.precision, "jit": bool(args.jit), "batch": args.batch,
            "setting": "baseline" if args.baseline else built.variant,
            "steps": args.steps, "wall_seconds": wall, "step_ms": 1000 * wall / args.steps, "cores": cores,
            "target_tokens_per_second": args.steps * args.batch * args.tgt_len / wall,
            "core_seconds": {c: seconds[c] for c in CATEGORIES},
            "top_ops": [[name, s] for name, s in ops.most_common(args.top)]}


def markdown(result):
    total = sum(result["core_seconds"].values())
    mode = "XLA" if result["jit"] else "graph"
    head = (f"### {result['setting']}: {result['size']}, {result['precision']}, {mode}, batch "
            f"{result['batch']}: {result['step_ms']:.0f} ms a step, {result['target_tokens_per_second']:,.0f} target "
            f"tokens/s ({result['steps']} traced steps, {result['cores']} cores; "
            f"{platform.processor() or platform.machine()}, {datetime.date.today()})\n\n")
    rows = ["| where | core-seconds a step | share |", "|---|---:|---:|"]
    for category, value in result["core_seconds"].items():
        rows.append(f"| {category} | {value / result['steps']:.3f} | {100 * value / total:.1f}% |")
    rows += ["", "| slowest ops (type, scope) | ms a step |", "|---|---:|"]
    rows += [f"| `{name}` | {1000 * s / result['steps']:.1f} |" for name, s in result["top_ops"]]
    return head + "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(bc.SIZES), default="small")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--jit", type=int, choices=(0, 1), default=0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=15, help="how many of the slowest ops to list")
    parser.add_argument("--baseline", action="store_true",
                        help="Keras' Adam and Dropout and no fused elementwise ops (the step before the levers)")
    parser.add_argument("--output", type=pathlib.Path, help="append the markdown table to this file")
    parser.add_argument("--json", type=pathlib.Path, help="append the result as one JSON line to this file")
    args = parser.parse_args(argv)
    result = profile(args)
    text = markdown(result)
    print(text)
    if args.output:
        with args.output.open("a", encoding="utf-8") as out:
            out.write("\n" + text)
    if args.json:
        with args.json.open("a", encoding="utf-8") as out:
            out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
