"""What the divergence guard costs a run that never diverges: its loss curve and its speed.

    python bench/bench_divergence_guard.py curve --out /tmp/curve.json     # tiny toy runs, float32 and bf16
    python bench/bench_divergence_guard.py speed --out /tmp/speed.json     # mini, 200 updates
    python bench/bench_divergence_guard.py speed-ab --out /tmp/ab.json     # mini's step without and with the guard

`curve` trains the tiny preset on a toy corpus (dropout on) for 60 updates in float32 (graph mode and XLA) and in
mixed_bfloat16, and writes the loss Keras logs after every update and a sha256 of the final checkpoint's model
weights: run on two trees, equal files mean bit-identical training. `speed` trains `mini` on its default corpus
for 10 + 200 updates (no checkpoint, no attention summaries) and reports the updates per second of the last 200,
after waiting for a quiet machine (`timing.wait_for_quiet`): run it on each tree, one after the other. `speed-ab`
compiles mini's step without the guard (Keras' own step, as before it) and with it in one process, and times them
in alternating blocks of 28 updates on random batches of every bucket shape, so that load from other processes
falls on both alike. The guard's figures are in docs/results.md ("A diverging loss").
"""

import argparse
import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests.helpers: the toy corpus

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from timing import wait_for_quiet  # noqa: E402

WARMUP, TIMED = 10, 200


class Trace(keras.callbacks.Callback):
    """The logged loss, the time and the process' CPU time (all its threads) after every update."""

    def __init__(self):
        super().__init__()
        self.losses, self.times, self.cpu_times = [], [], []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))
        self.times.append(time.perf_counter())
        self.cpu_times.append(time.process_time())


def weights_digest(run_dir):
    """sha256 over the model variables of the run's newest checkpoint, in name order."""
    path = tf.train.latest_checkpoint(str(pathlib.Path(run_dir) / "checkpoints"))
    digest = hashlib.sha256()
    for name, _ in sorted(tf.train.list_variables(path)):
        if name.startswith("model/"):
            digest.update(np.ascontiguousarray(tf.train.load_variable(path, name)).tobytes())
    return digest.hexdigest()


def curve(tmp):
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training.trainer import train
    from tests.helpers import toy_config, write_toy_corpus

    files = write_toy_corpus(pathlib.Path(tmp) / "data", train=300)
    result = {}
    for name, precision, jit in (("float32", "float32", False), ("mixed_bfloat16", "mixed_bfloat16", False),
                                 ("float32-xla", "float32", True)):
        trace, run_dir = Trace(), pathlib.Path(tmp) / name
        config = toy_config(files, train_steps=60, steps_per_epoch=20, checkpoint_every_steps=60,
                            mixed_precision=precision, jit_compile=jit)
        train(resolve_run(run_dir, config), callbacks=[trace], verbose=0)
        result[name] = {"losses": trace.losses, "weights_sha256": weights_digest(run_dir)}
    return result


def speed(tmp):
    from t2t_keras.config import load_config
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training.trainer import train

    config = load_config("mini", [f"training.train_steps={WARMUP + TIMED}", "training.checkpoint_every_steps=100000",
                                  "training.checkpoint_every_minutes=600", "training.attention_every_steps=0"])
    trace = Trace()
    quiet = wait_for_quiet()
    train(resolve_run(pathlib.Path(tmp) / "mini", config), callbacks=[trace], verbose=0)
    seconds = trace.times[-1] - trace.times[WARMUP - 1]
    return {"updates": TIMED, "seconds": round(seconds, 2), "updates_per_second": round(TIMED / seconds, 3),
            "quiet_before": quiet, "logged_losses": trace.losses}


def mini_batches(config):
    """Random batches of every bucket shape of `config`'s batching, in a fixed order (seeded)."""
    from t2t_keras.data.batching import bucket_plan

    plan = bucket_plan(config.data.max_length, config.data.batch_tokens)
    rng, batches = np.random.default_rng(0), []
    for length, rows in zip(plan.lengths, plan.batch_sizes):
        ids = rng.integers(4, config.model.vocab_size, size=(rows, length)).astype("int32")
        batches.append(tf.data.Dataset.from_tensors(((ids, ids), ids, np.ones((rows, length), "float32"))))
    dataset = batches[0]
    for batch in batches[1:]:
        dataset = dataset.concatenate(batch)
    options = tf.data.Options()
    options.autotune.enabled = False  # each fit deletes its iterator: an autotuned one waits for its thread
    return dataset.repeat().with_options(options)


def speed_ab(tmp, rounds=12, steps=29):
    """mini's step without and with the guard (and its monitor), compiled as `train` compiles them, timed in
    alternating blocks of `steps` updates in one process, so that other load falls on both alike: each block's
    time runs from its first update's end to its last's (28 updates: four passes over the 7 bucket shapes)."""
    from t2t_keras.config import load_config, replace
    from t2t_keras.training.divergence import DivergenceMonitor
    from t2t_keras.training.guard import DivergenceGuard
    from t2t_keras.training.precision import choose_fusion, choose_jit, choose_precision
    from t2t_keras.training.strategy import make_strategy
    from t2t_keras.training.trainer import compile_model

    config = load_config("mini")
    t = config.training
    precision = choose_precision(t.mixed_precision)
    jit = choose_jit(t.jit_compile, precision)
    config = replace(config, training={"mixed_precision": precision, "jit_compile": jit,
                                       "fuse_elementwise": choose_fusion(t.fuse_elementwise, precision, jit)})
    strategy, data = make_strategy("auto"), mini_batches(config)
    guard = DivergenceGuard.create(strategy, config.training)
    runs = {"without": (compile_model(config, strategy), []), "with": (compile_model(config, strategy, guard),
                                                                        [DivergenceMonitor(guard)])}
    seconds, cpu_seconds = {name: [] for name in runs}, {name: [] for name in runs}
    for name, (model, callbacks) in runs.items():  # every shape traced before timing
        model.fit(data, steps_per_epoch=2 * 7, epochs=1, verbose=0, callbacks=callbacks)
    for index in range(rounds):
        for name in (("without", "with") if index % 2 == 0 else ("with", "without")):
            model, callbacks = runs[name]
            trace = Trace()
            model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=callbacks + [trace])
            seconds[name].append(trace.times[-1] - trace.times[0])
            cpu_seconds[name].append(trace.cpu_times[-1] - trace.cpu_times[0])
    median = {name: float(np.median(values)) for name, values in seconds.items()}
    cpu = {name: float(np.median(values)) for name, values in cpu_seconds.items()}
    return {"precision": precision, "jit_compile": jit, "updates_per_block": steps - 1, "blocks": rounds,
            "updates_per_second": {name: round((steps - 1) / value, 3) for name, value in median.items()},
            "with_over_without": round(median["without"] / median["with"], 4),
            "cpu_seconds_per_update": {name: round(value / (steps - 1), 4) for name, value in cpu.items()},
            "cpu_with_over_without": round(cpu["with"] / cpu["without"], 4), "block_seconds": seconds,
            "block_cpu_seconds": cpu_seconds}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("curve", "speed", "speed-ab"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        result = {"curve": curve, "speed": speed, "speed-ab": speed_ab}[args.what](tmp)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")),
                      platform.processor())
    result.update(machine=model_name, cores=os.cpu_count())
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (dict, list)) or k == "updates_per_second"}))


if __name__ == "__main__":
    main()
