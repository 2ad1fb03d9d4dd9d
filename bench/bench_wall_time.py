"""What timing a training session costs (training/wall_time.py): per step in the callbacks, and in steps/s.

    python bench/bench_wall_time.py hooks                   # microseconds a step of SessionClock and Timed
    python bench/bench_wall_time.py train --minutes 4       # `mini` steps/s, timed and untimed, back to back

`hooks` drives the trainer's callbacks as `fit` does, around a train function that does nothing: the timer's
own cost a step, with and without it. `train` trains `mini` on the default corpus twice in fresh processes, once
as `train` does (timed) and once with `SessionClock` and `Timed` taken out (untimed), `training.fuse_elementwise`
off so that no compilation falls into the window; it counts the steps after the first `--skip` seconds of
`fit` and records the load average and the cores other processes used meanwhile. Prints one JSON line a variant.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def hooks(steps):
    """Microseconds a step of the trainer's callback hooks, untimed and timed (`SessionClock` + `Timed`)."""
    import keras
    import tensorflow as tf

    from t2t_keras.training.wall_time import SessionClock, WallClock, timed

    class Model:
        optimizer = type("Optimizer", (), {"iterations": tf.Variable(0, dtype=tf.int64)})()

        @staticmethod
        def train_function(iterator):
            return None

    def run(with_clock):
        clock = WallClock()
        class Callback(keras.callbacks.Callback):  # one hook a step, as the trainer's timed callbacks have
            def on_train_batch_end(self, batch, logs=None):
                return None

        callbacks = [Callback() for _ in range(6)]
        if with_clock:
            callbacks = [SessionClock(clock)] + [timed(callback, clock, "logging") for callback in callbacks]
        model = Model()
        for callback in callbacks:
            callback.set_model(model)
            callback.on_train_begin()
        began = time.perf_counter()
        for step in range(steps):
            for callback in callbacks:
                callback.on_train_batch_begin(step)
            model.train_function(None)
            for callback in callbacks:
                callback.on_train_batch_end(step, {"loss": 1.0})
        return (time.perf_counter() - began) / steps * 1e6

    return {"untimed_us_per_step": round(run(False), 2), "timed_us_per_step": round(run(True), 2)}


def child(variant, run_dir, minutes, skip):
    """One training session of `variant` ("timed" or "untimed"): steps/s after `skip` seconds."""
    import keras

    from bench.timing import busy_cores_seconds
    from t2t_keras.config import load_config
    from t2t_keras.pipeline import train_run
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.training import fitting, trainer

    if variant == "untimed":
        fitting.timed = lambda callback, clock, part=None: callback
        trainer.SessionClock = lambda clock: type("Untimed", (keras.callbacks.Callback,), {"clock": clock})()
        trainer._timing = lambda training, session, start: None
    ends = []

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append((time.monotonic(), busy_cores_seconds(), time.process_time()))

    original = fitting._callbacks
    fitting._callbacks = lambda *args, **kwargs: original(*args, **kwargs) + [Steps()]
    load = os.getloadavg()
    train_run(resolve_run(run_dir, load_config("mini", ["training.fuse_elementwise=false"])), minutes)
    window = [end for end in ends if end[0] >= ends[0][0] + skip]
    seconds = window[-1][0] - window[0][0]
    other = ((window[-1][1] - window[0][1]) - (window[-1][2] - window[0][2])) / seconds
    return {"variant": variant, "steps_per_second": round((len(window) - 1) / seconds, 3), "window_s": round(seconds),
            "steps": len(ends), "load_before": load, "load_after": os.getloadavg(), "other_cores": round(other, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("hooks", "train"))
    parser.add_argument("--steps", type=int, default=100000, help="hooks: steps driven")
    parser.add_argument("--minutes", type=float, default=4.0, help="train: minutes of each session")
    parser.add_argument("--skip", type=float, default=60.0, help="train: seconds of fit not counted (tracing)")
    parser.add_argument("--variants", default="untimed,timed", help="train: the order of the sessions")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "RUN_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode == "hooks":
        print(json.dumps(hooks(args.steps)))
    elif args.child:
        print(json.dumps(child(*args.child, args.minutes, args.skip)))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for variant in args.variants.split(","):
                command = [sys.executable, __file__, "train", "--minutes", str(args.minutes), "--skip",
                           str(args.skip), "--child", variant, f"{tmp}/{variant}"]
                output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                print(output.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
