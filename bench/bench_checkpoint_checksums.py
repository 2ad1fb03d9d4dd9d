"""What recording a checkpoint's sha256 costs against the save itself, for `mini` and `base` weights.

    python bench/bench_checkpoint_checksums.py --out bench/results/checkpoint_checksums.md

For each preset, the model and its Adam moments as `train` checkpoints them:

    TensorFlow save   `tf.train.CheckpointManager.save` alone, as before checksums were recorded
    blocking save     `training.checkpoints.CheckpointManager.save`: the same save, and the thread started that
                      records the checksums (what training waits for)
    record            that thread's work alone: the sha256 of the files, written beside them; also its CPU
                      seconds (`record CPU s`), which other processes on the machine do not stretch
    verify            what a resume or a reader adds before loading the checkpoint

Medians of `--repeats`, each save to a new checkpoint number in a temporary directory on the disk of `--dir`
(the files hashed are in the page cache then, as they are in training).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.timing import add_arguments, busy_cores_seconds, measure_quietly, publish, table_report  # noqa: E402

PRESETS = ("mini", "base")


def built_model(preset):
    """`(model, optimizer)` of `preset`: the model and its built Adam optimizer (moments included)."""
    from t2t_keras.build import build_model
    from t2t_keras.config import load_config
    from t2t_keras.training.schedule import make_optimizer

    config = load_config(preset)
    model = build_model(config.model)
    optimizer = make_optimizer(config.model.hidden_dim, config.training.warmup_steps)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def blocking_saves(manager, optimizer, repeats):
    """`(median seconds of CheckpointManager.save, other processes' cores)`, its recording awaited untimed."""
    times, machine, own, wall = [], busy_cores_seconds(), time.process_time(), time.perf_counter()
    for _ in range(repeats):
        manager.wait()
        optimizer.iterations.assign_add(1)
        start = time.perf_counter()
        manager.save()
        times.append(time.perf_counter() - start)
    manager.wait()
    wall = time.perf_counter() - wall
    return statistics.median(times), max(0.0, (busy_cores_seconds() - machine) - (time.process_time() - own)) / wall


def measure_preset(preset, directory, args):
    """The row of `preset`: checkpoint MB and the medians in seconds (see the module docstring)."""
    import tensorflow as tf

    from t2t_keras.checksums import checkpoint_files, record_checkpoint, verify_checkpoint
    from t2t_keras.training.checkpoints import CheckpointManager

    model, optimizer = built_model(preset)
    plain = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer),
                                       os.path.join(directory, preset, "plain"), max_to_keep=2)
    numbers = iter(range(1, 10**6))
    quiet = dict(quiet_wait=args.quiet_wait, max_other=args.max_other, retries=args.retries)
    tf_save = measure_quietly(lambda: plain.save(checkpoint_number=next(numbers)), args.repeats, **quiet)
    record = measure_quietly(lambda: record_checkpoint(plain.latest_checkpoint), args.repeats, **quiet)
    verify = measure_quietly(lambda: verify_checkpoint(plain.latest_checkpoint, ""), args.repeats, **quiet)
    cpu = time.process_time()
    record_checkpoint(plain.latest_checkpoint)
    cpu = time.process_time() - cpu
    ours = CheckpointManager(os.path.join(directory, preset, "ours"), model, optimizer, keep=2)
    blocking, other = blocking_saves(ours, optimizer, args.repeats)
    size = sum(path.stat().st_size for path in checkpoint_files(plain.latest_checkpoint)) / 1e6
    other = max(other, *(result["other_cores"] for result in (tf_save, record, verify)))
    return (f"| {preset} | {size:,.0f} | {tf_save['median_s']:.3f} | {blocking:.3f} | {record['median_s']:.3f} | "
            f"{record['median_s'] / tf_save['median_s']:.0%} | {cpu:.3f} ({size / cpu:,.0f} MB/s) | "
            f"{verify['median_s']:.3f} | {other:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the checkpoints are written (default: the temp dir)")
    parser.add_argument("--out", help="also write the markdown report here")
    add_arguments(parser)
    args = parser.parse_args(argv)
    import keras
    import tensorflow as tf

    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        rows = [measure_preset(preset, directory, args) for preset in PRESETS]
    prose = ("`python bench/bench_checkpoint_checksums.py`: the model and its Adam moments saved by TensorFlow's "
             "`CheckpointManager` alone, then by `train`'s (`blocking save`: what training waits for, the checksums "
             "recorded by a thread beside it), the recording alone (`record`: the sha256 of the files, written "
             f"beside them) and its check (`verify`: a resume, a reader); medians of {args.repeats}. Other cores: "
             "the most other processes used during a measurement.")
    header = ("| preset | checkpoint MB | TensorFlow save s | blocking save s | record s | record / save | "
              "record CPU s | verify s | other cores |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    publish(table_report("# The cost of a checkpoint's checksums", prose, header, rows,
                         f"TensorFlow {tf.__version__}, Keras {keras.__version__}"), args.out)


if __name__ == "__main__":
    main()
