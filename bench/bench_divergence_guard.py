"""What the divergence guard costs a run that never diverges: its loss curve and its speed.

    python bench/bench_divergence_guard.py curve --out /tmp/curve.json    # tiny toy runs, float32 and bf16
    python bench/bench_divergence_guard.py speed --out /tmp/speed.json    # mini, 200 updates

`curve` trains the tiny preset on a toy corpus (dropout on) for 60 updates in float32 and in mixed_bfloat16 and
writes the loss Keras logs after every update and a sha256 of the final checkpoint's model weights: run on two
trees, equal files mean bit-identical training. `speed` trains `mini` on its default corpus for 10 + 200 updates
(no checkpoint, no attention summaries) and reports the updates per second of the last 200, after waiting for a
quiet machine (`timing.wait_for_quiet`). The guard's figures are in docs/results.md ("A diverging loss").
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
    """The logged loss and the time after every update."""

    def __init__(self):
        super().__init__()
        self.losses, self.times = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))
        self.times.append(time.perf_counter())


def weights_digest(run_dir):
    """sha256 over the model variables of the run's newest checkpoint, in name order."""
    path = tf.train.latest_checkpoint(str(pathlib.Path(run_dir) / "checkpoints"))
    digest = hashlib.sha256()
    for name, _ in sorted(tf.train.list_variables(path)):
        if name.startswith("model/"):
            digest.update(np.ascontiguousarray(tf.train.load_variable(path, name)).tobytes())
    return digest.hexdigest()


def curve(tmp):
    from t2t_keras.training.trainer import train
    from tests.helpers import toy_config, write_toy_corpus

    files = write_toy_corpus(pathlib.Path(tmp) / "data", train=300)
    result = {}
    for precision in ("float32", "mixed_bfloat16"):
        trace, run_dir = Trace(), pathlib.Path(tmp) / precision
        config = toy_config(files, train_steps=60, steps_per_epoch=20, checkpoint_every_steps=60,
                            mixed_precision=precision)
        train(config, run_dir, callbacks=[trace], verbose=0)
        result[precision] = {"losses": trace.losses, "weights_sha256": weights_digest(run_dir)}
    return result


def speed(tmp):
    from t2t_keras.config import load_config
    from t2t_keras.training.trainer import train

    config = load_config("mini", [f"training.train_steps={WARMUP + TIMED}", "training.checkpoint_every_steps=100000",
                                  "training.checkpoint_every_minutes=600", "training.attention_every_steps=0"])
    trace = Trace()
    quiet = wait_for_quiet()
    train(config, pathlib.Path(tmp) / "mini", callbacks=[trace], verbose=0)
    seconds = trace.times[-1] - trace.times[WARMUP - 1]
    return {"updates": TIMED, "seconds": round(seconds, 2), "updates_per_second": round(TIMED / seconds, 3),
            "quiet_before": quiet}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("curve", "speed"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        result = {"curve": curve, "speed": speed}[args.what](tmp)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")),
                      platform.processor())
    result.update(machine=model_name, cores=os.cpu_count())
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("float32", "mixed_bfloat16")}))


if __name__ == "__main__":
    main()
