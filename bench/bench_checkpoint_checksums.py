"""What recording a checkpoint's sha256 costs against the save itself, for `mini` and `base` weights.

    python bench/bench_checkpoint_checksums.py --out bench/results/checkpoint_checksums.md

For each preset: the model and its Adam moments, as `train` checkpoints them, saved by TensorFlow's
`CheckpointManager` (`save`), then the sha256 of its files recorded as `training.checkpoints` records it after
every save (`record`), and checked as a resume or a reader checks it (`verify`). Medians of `--repeats` saves, each
to a new checkpoint number in a temporary directory on the disk of `--dir` (the files read back for hashing are
in the page cache then, as they are in training).
"""

import argparse
import itertools
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.timing import add_arguments, measure_quietly, publish, table_report  # noqa: E402

PRESETS = ("mini", "base")


def saved_weights(preset):
    """`tf.train.Checkpoint` of `preset`'s model and its built Adam optimizer (moments included)."""
    import tensorflow as tf

    from t2t_keras.build import build_model
    from t2t_keras.config import load_config
    from t2t_keras.training.schedule import make_optimizer

    config = load_config(preset)
    model = build_model(config.model)
    model.build()
    optimizer = make_optimizer(config.model.hidden_dim, config.training.warmup_steps)
    optimizer.build(model.trainable_variables)
    return tf.train.Checkpoint(model=model, optimizer=optimizer)


def measure_preset(preset, directory, args):
    """`(size in MB, save, record, verify)` medians in seconds for `preset`."""
    import tensorflow as tf

    from t2t_keras.checksums import checkpoint_files, record_checkpoint, verify_checkpoint

    manager = tf.train.CheckpointManager(saved_weights(preset), os.path.join(directory, preset), max_to_keep=2)
    numbers = itertools.count(1)
    quiet = dict(quiet_wait=args.quiet_wait, max_other=args.max_other, retries=args.retries)
    save = measure_quietly(lambda: manager.save(checkpoint_number=next(numbers)), args.repeats, **quiet)
    record = measure_quietly(lambda: record_checkpoint(manager.latest_checkpoint), args.repeats, **quiet)
    verify = measure_quietly(lambda: verify_checkpoint(manager.latest_checkpoint, ""), args.repeats, **quiet)
    size = sum(path.stat().st_size for path in checkpoint_files(manager.latest_checkpoint)) / 1e6
    return size, save, record, verify


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the checkpoints are written (default: the temp dir)")
    parser.add_argument("--out", help="also write the markdown report here")
    add_arguments(parser)
    args = parser.parse_args(argv)
    import keras
    import tensorflow as tf

    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for preset in PRESETS:
            size, save, record, verify = measure_preset(preset, directory, args)
            rows.append(f"| {preset} | {size:,.0f} | {save['median_s']:.3f} | {record['median_s']:.3f} | "
                        f"{record['median_s'] / save['median_s']:.0%} | {verify['median_s']:.3f} | "
                        f"{max(save['other_cores'], record['other_cores']):.2f} |")
    prose = ("`python bench/bench_checkpoint_checksums.py`: the model and its Adam moments saved by TensorFlow's "
             "`CheckpointManager`, the sha256 of the files recorded after it (what `train` adds to every save) and "
             f"checked (a resume, a reader); medians of {args.repeats}. Other cores: what other processes used "
             "during the measurement.")
    header = ("| preset | checkpoint MB | save s | record s | record / save | verify s | other cores |\n"
              "|---|---:|---:|---:|---:|---:|---:|")
    publish(table_report("# The cost of a checkpoint's checksums", prose, header, rows,
                         f"TensorFlow {tf.__version__}, Keras {keras.__version__}"), args.out)


if __name__ == "__main__":
    main()
