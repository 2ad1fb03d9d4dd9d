"""Graph size and tracing time of the model's functions: its projections as one matrix product over the positions
as rows and its reshapes from one slice of the shape (`layers.Dense`, `layers.shapes`), against Keras' `Dense`
(`tf.tensordot` for rank > 2 inputs) on `(batch, length, width)` inputs and shapes from `ops.shape`.

    PYTHONPATH=$PWD python bench/bench_graph_size.py [--repeats 7] [--output bench/results/graph_size.md]

For `tiny` (d_model 64, N=2) and `mini`: the ops of the traced forward pass, of a training step's graph (forward,
loss and gradients) and of one greedy search (`decoding.greedy`, cached), and the CPU seconds each trace takes
(median of `--repeats`, the two projections alternating in one process, so that both see the same machine).
The "Keras" arm is the same model with `layers.Dense.call` set back to `keras.layers.Dense.call`,
`shapes.reshape_trailing` taking its `ops.shape` branch on TensorFlow too, `shapes.rows` leaving the
`(batch, length)` axes in place (the attention's heads merged to `(batch, length, heads * dim)` by a reshape), and
`layers.LayerNormalization.call` set back to Keras' (which reshapes gamma and beta on every call).
"""

import argparse
import datetime
import platform
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.build import build_model
from t2t_keras.config import load_config
from t2t_keras.decoding.greedy import greedy_decode
from t2t_keras.layers import dense, feed_forward, layer_normalization, multi_head_attention, shapes

OURS = (dense.Dense.call, shapes.reshape_trailing, shapes.rows, layer_normalization.LayerNormalization.call)


def keras_reshape_trailing(x, count, dims, like=None):
    like = x if like is None else like
    return keras.ops.reshape(x, (*keras.ops.shape(like)[:-count], *dims))


def keras_rows(x, width=None):
    """The layers as they were before `rows`: positions kept as (batch, length) axes, heads merged by a reshape."""
    return x if width is None else keras_reshape_trailing(x, 2, (width,))


ARMS = {"ours": OURS, "Keras": (keras.layers.Dense.call, keras_reshape_trailing, keras_rows,
                               keras.layers.LayerNormalization.call)}


def use(arm):
    dense.Dense.call, reshape, rows, layer_normalization.LayerNormalization.call = ARMS[arm]
    for module in (dense, feed_forward, multi_head_attention):
        module.reshape_trailing = reshape
        if hasattr(module, "rows"):
            module.rows = rows


def build(preset):
    keras.utils.set_random_seed(0)
    return build_model(load_config(preset).model)


def functions(model):
    ids = tf.TensorSpec([None, None], tf.int32)

    def forward(source, target):
        return model((source, target))

    def train_step(source, target):
        with tf.GradientTape() as tape:
            logits = model((source, target), training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(target, logits))
        return tape.gradient(loss, model.trainable_variables)

    def greedy(source):
        return greedy_decode(model, source, max_extra_length=10)["tokens"]

    return {"forward": (forward, (ids, ids)), "training step": (train_step, (ids, ids)), "greedy search": (greedy, (ids,))}


def trace(function, specs):
    start = time.process_time()
    concrete = tf.function(function).get_concrete_function(*specs)
    seconds = time.process_time() - start
    graph = concrete.graph.as_graph_def()
    ops = len(graph.node) + sum(len(f.node_def) for f in graph.library.function)
    return ops, seconds


def measure(presets, repeats):
    rows = []
    for preset in presets:
        model = build(preset)
        for name, (function, specs) in functions(model).items():
            results = {arm: [] for arm in ARMS}
            for _ in range(repeats):
                for arm in ARMS:
                    use(arm)
                    results[arm].append(trace(function, specs))
            use("ours")
            row = {"preset": preset, "function": name}
            for arm, values in results.items():
                row[arm] = (values[0][0], statistics.median(s for _, s in values))
            rows.append(row)
            print(row, flush=True)
    return rows


def markdown(rows, repeats):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    lines = [
        "# Graph size: the model's projections as one matrix product over rows, its reshapes from one shape slice",
        "",
        f"Machine: {cpu}, {len(__import__('os').sched_getaffinity(0))} cores; tf {tf.__version__}, keras "
        f"{keras.__version__}; {datetime.date.today()}. `python bench/bench_graph_size.py --repeats {repeats}`.",
        "",
        "Ops: nodes of the traced graph and of the functions it holds (a search's loop body). CPU: seconds to "
        f"trace, median of {repeats}, both arms alternating in one process. \"Keras\": Keras' `Dense`, which "
        "multiplies rank-3 inputs with `tf.tensordot`, and head reshapes to shapes from `ops.shape` (a slice and "
        "three constants per dynamic dimension); \"ours\": `layers.Dense` (reshape, MatMul, reshape: the same "
        "kernel on the same numbers), `layers.shapes.reshape_trailing` (one Shape, one slice, one concat) and "
        "`layers.shapes.rows`: the attention's and the feed-forward network's products on the positions as rows "
        "of one matrix, one reshape in and one out (the heads split and merged in the same reshapes); "
        "`layers.LayerNormalization` (Keras' without reshaping gamma and beta on every call).",
        "",
        "| preset | function | ops, Keras | ops, ours | fewer | CPU s, Keras | CPU s, ours |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        (ops_t, cpu_t), (ops_o, cpu_o) = row["Keras"], row["ours"]
        lines.append(f"| {row['preset']} | {row['function']} | {ops_t:,} | {ops_o:,} | {1 - ops_o / ops_t:.0%} | "
                     f"{cpu_t:.2f} | {cpu_o:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", help="write the table here (markdown)")
    args = parser.parse_args()
    np.random.seed(0)
    text = markdown(measure(args.presets, args.repeats), args.repeats)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)


if __name__ == "__main__":
    main()
