"""The same `train` run (the `mini` preset on the default corpus) on each road of its training batches.

    python bench/bench_roads_training.py --steps 300 --record bench/results/roads_training.json

Roads, each in a fresh process on a quiet machine, all with the same vocabulary (the first run's, copied):
- `prepared`: shards on disk (`data.pipeline=prepared`);
- `memory`: the pairs tokenized once into shards in memory, the same batch planner (the default below 256 MB);
- `streamed`: tokenization in the graph as the batches stream through a shuffle buffer (the road of TFDS
  datasets, mixtures and language models, and of every translation corpus before the planner).
Recorded: the training loss every 25 updates, and target tokens/s from update 50 on (after compilation).
`bench_data_scale.py --report` puts the table in bench/results/data_scale.md.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from timing import busy_cores_seconds, wait_for_quiet  # noqa: E402

ROADS = ("prepared", "memory", "streamed")
EVERY = 25


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--record", help="write the results (JSON) here")
    parser.add_argument("--workdir")
    parser.add_argument("--road", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench-roads-"))
    if args.road:
        print(json.dumps(run_road(args.road, args.steps, workdir)))
        return
    results = {}
    for road in ROADS:
        wait_for_quiet(max_wait=float(os.environ.get("QUIET_WAIT", 120)))
        before, start = busy_cores_seconds(), time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--road", road, "--steps", str(args.steps), "--workdir",
                               str(workdir)], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{road} failed:\n{done.stderr[-4000:]}")
        wall = time.perf_counter() - start
        results[road] = dict(json.loads(done.stdout.strip().splitlines()[-1]),
                             busy_cores=round((busy_cores_seconds() - before) / wall, 2))
        if road == ROADS[0]:
            for other in ROADS[1:]:
                (workdir / other).mkdir(parents=True, exist_ok=True)
                shutil.copy(workdir / road / "tokenizer.model", workdir / other / "tokenizer.model")
    print(json.dumps(results, indent=1))
    if args.record:
        pathlib.Path(args.record).write_text(json.dumps(dict(steps=args.steps, date=time.strftime("%Y-%m-%d"),
                                                              roads=results), indent=1) + "\n")


def run_road(road, steps, workdir):
    import keras

    from t2t_keras.config import load_config
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.tasks import data_route
    from t2t_keras.training.trainer import train

    class Curve(keras.callbacks.Callback):
        points = []

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            if step % EVERY == 0:
                self.points.append((step, float(logs["loss"]), time.perf_counter(), float(logs["target_tokens"])))

    pipeline = "prepared" if road == "prepared" else "memory"
    config = load_config("mini", [f"data.pipeline={pipeline}", f"training.train_steps={steps}",
                                  f"training.steps_per_epoch={steps + 1}", "training.attention_every_steps=0",
                                  f"training.checkpoint_every_steps={steps}", "training.eval_every_steps=0"])
    if road == "streamed":
        data_route.plans_in_memory = lambda *args: False
        import t2t_keras.tasks.base as base

        base.plans_in_memory = data_route.plans_in_memory
    curve = Curve()
    train(resolve_run(workdir / road, config), callbacks=[curve], verbose=0)
    timed = [point for point in curve.points if point[0] >= 50]
    (_, _, t0, k0), (_, _, t1, k1) = timed[0], timed[-1]
    return dict(loss=[(step, loss) for step, loss, _, _ in curve.points], target_tokens_per_s=(k1 - k0) / (t1 - t0))


if __name__ == "__main__":
    main()
