"""Distributed training of the Transformer: 2 replicas == 1 replica; two workers over TF_CONFIG agree.

Logical CPU devices and TF_CONFIG must be set before TensorFlow initialises,
so the work runs in child processes (`python -m tests.test_distributed --child`).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf
import yaml

from t2t_keras.config import replace
from t2t_keras.model import build_transformer
from t2t_keras.runs import checkpoint_paths
from tests.cluster import cluster_ports, run_workers
from tests.helpers import TestCase, long_check, random_ids, toy_config, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _batch():
    """A global batch of 4 whose halves have different amounts of target padding."""
    source = random_ids(4, 7, vocab_size=100, seed=1)
    target = random_ids(4, 6, vocab_size=100, seed=2)
    target[2:, 2:] = 0
    target_in = np.concatenate([np.full((4, 1), 2), target[:, :-1]], 1).astype("int32")
    return (source, target_in), target, (target != 0).astype("float32")


def child_replicas():
    """Prints the weights after two fit steps on 2 replicas and on 1 replica."""
    import keras

    from t2t_keras.training.strategy import split_cpu_for_testing
    from t2t_keras.training.trainer import compile_model

    devices = split_cpu_for_testing(2)
    config = replace(toy_config({"train": [], "dev": [], "test": []}), model={"vocab_size": 100, "dropout": 0.0})
    (x, y, w), results = _batch(), {}
    initial = None
    for name, strategy_devices in (("two", devices), ("one", devices[:1])):
        strategy = tf.distribute.MirroredStrategy(strategy_devices)
        model = compile_model(config, strategy)
        with strategy.scope():  # SGD: Adam's near-sign first steps amplify float rounding into sign flips
            model.compile(optimizer=keras.optimizers.SGD(0.5), loss=model.loss, metrics=model.metrics[1:],
                          jit_compile=False)
        initial = initial or model.get_weights()
        model.set_weights(initial)
        history = model.fit(tf.data.Dataset.from_tensors((x, y, w)).repeat(2), epochs=1, verbose=0)
        results[name] = {"weights": [v.tolist() for v in model.get_weights()[:6]],
                         "loss": history.history["loss"][-1], "replicas": strategy.num_replicas_in_sync}
    print(json.dumps(results))


class MirroredReplicasTest(TestCase):
    def test_two_replicas_train_like_one_on_the_same_global_batch(self):
        result = subprocess.run([sys.executable, "-m", "tests.test_distributed", "--child"], capture_output=True,
                                text=True, env=ENV, cwd=REPO, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        results = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual((results["two"]["replicas"], results["one"]["replicas"]), (2, 1))
        self.assertAllClose(results["two"]["loss"], results["one"]["loss"], rtol=1e-5)
        for a, b in zip(results["two"]["weights"], results["one"]["weights"]):
            self.assertAllClose(a, b, atol=2e-6)


@long_check
class MultiWorkerTest(TestCase):
    def test_two_workers_on_localhost_finish_and_agree(self):
        with tempfile.TemporaryDirectory() as tmp:
            files = write_toy_corpus(pathlib.Path(tmp) / "data", train=200)
            config = replace(toy_config(files), training={"train_steps": 4, "steps_per_epoch": 2,
                                                          "checkpoint_every_steps": 2, "strategy": "multi_worker"})
            config_path = pathlib.Path(tmp) / "toy.yaml"
            config_path.write_text(yaml.safe_dump(config.to_dict()))
            run_dir = pathlib.Path(tmp) / "run"
            workers = [f"127.0.0.1:{port}" for port in cluster_ports(2)]
            command = [sys.executable, "-m", "t2t_keras", "train", "--config", str(config_path), "--run-dir",
                       str(run_dir)]
            envs = [dict(ENV, TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                    "task": {"type": "worker", "index": index}}))
                    for index in range(2)]
            for returncode, out, err in run_workers([command] * 2, envs, REPO, timeout=400):
                self.assertEqual(returncode, 0, err[-3000:])
                self.assertIn("to 4", out)
            chief = checkpoint_paths(run_dir / "checkpoints")[-1]
            other = checkpoint_paths(run_dir / "checkpoints" / ".worker-1")[-1]
            self.assertTrue(chief.endswith("-4") and other.endswith("-4"), (chief, other))
            weights = []
            for path in (chief, other):
                model = build_transformer(config.model)
                model.build()
                tf.train.Checkpoint(model=model).restore(path).expect_partial()
                weights.append(model.get_weights())
            for a, b in zip(*weights):
                self.assertAllClose(a, b, atol=1e-6)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child_replicas()
    else:
        tf.test.main()
