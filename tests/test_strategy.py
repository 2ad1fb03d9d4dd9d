"""make_strategy, and one MirroredStrategy step over 2 logical CPUs equal to one single-device step.

Logical CPUs must be configured before TensorFlow initialises its devices, which the test
process has already done, so the two-replica comparison runs in a subprocess
(`python -m tests.test_strategy --child`) that prints its results as JSON.
"""

import json
import os
import subprocess
import sys
from unittest import mock

import numpy as np
import tensorflow as tf

from t2t_keras.errors import ConfigError
from t2t_keras.training.strategy import make_strategy, split_cpu_for_testing, tf_config_worker_count
from tests.helpers import TestCase

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB, LENGTH = 11, 6


def make_batch():
    """A global batch of 4: replica 0 gets rows 0-1 (11 tokens), replica 1 rows 2-3 (3 tokens)."""
    rng = np.random.default_rng(0)
    inputs = rng.integers(1, VOCAB, size=(4, LENGTH)).astype("int32")
    targets = rng.integers(1, VOCAB, size=(4, LENGTH)).astype("int32")
    lengths = np.array([6, 5, 2, 1])
    targets[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    return inputs, targets, (targets != 0).astype("float32")


def build_model():
    import keras

    # A wide embedding initialisation spreads the per-token losses, so normalisation errors are visible.
    embedding = keras.layers.Embedding(VOCAB, 8, embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0))
    return keras.Sequential([keras.Input((LENGTH,), dtype="int32"), embedding, keras.layers.Dense(VOCAB)])


def train_one_step(strategy, loss, initial_weights, batch):
    """One `fit` step with global batch size 4; returns the new weights and the logged values."""
    import keras

    from t2t_keras.training.metrics import MaskedAccuracy, Perplexity

    inputs, targets, sample_weight = batch
    with strategy.scope():
        model = build_model()
        model.set_weights(initial_weights)
        # SGD: Adam's first step is lr · sign(g) and would hide a wrongly scaled gradient.
        model.compile(keras.optimizers.SGD(1.0), loss=loss, metrics=[MaskedAccuracy(), Perplexity()])
    history = model.fit(inputs, targets, sample_weight=sample_weight, batch_size=4, shuffle=False, verbose=0)
    return {
        "weights": [w.tolist() for w in model.get_weights()],
        "history": {k: float(v[0]) for k, v in history.history.items()},
    }


def child_main():
    """Trains one step on 1 and on 2 replicas with the same global batch; prints JSON."""
    devices = split_cpu_for_testing(2)
    import keras

    from t2t_keras.training.loss import LabelSmoothedCrossEntropy

    batch = make_batch()
    keras.utils.set_random_seed(0)
    model = build_model()
    initial = model.get_weights()
    losses = {
        "ours": lambda: LabelSmoothedCrossEntropy(epsilon=0.1),
        # Keras' own per-replica normalisation, to show that the test can tell the difference.
        "keras": lambda: keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        ),
    }
    strategies = {"one": make_strategy("one_device", devices=[devices[0]]), "two": make_strategy("auto")}
    results = {
        "devices": devices,
        "replicas": {name: strategy.num_replicas_in_sync for name, strategy in strategies.items()},
        "initial": [w.tolist() for w in initial],
        "sample_weight": batch[2].tolist(),
        # Un-smoothed per-token losses of the initial model, for the expected values.
        "per_token": np.asarray(LabelSmoothedCrossEntropy(epsilon=0.0).call(batch[1], model(batch[0]))).tolist(),
    }
    for loss_name, make_loss in losses.items():
        for strategy_name, strategy in strategies.items():
            results[f"{loss_name}_{strategy_name}"] = train_one_step(strategy, make_loss(), initial, batch)
    print(json.dumps(results))


class TwoReplicaStepTest(TestCase):
    @classmethod
    def setUpClass(cls):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        env.pop("TF_CONFIG", None)
        completed = subprocess.run(
            [sys.executable, "-m", "tests.test_strategy", "--child"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )
        if completed.returncode != 0:
            raise AssertionError(f"child process failed:\n{completed.stderr[-3000:]}")
        cls.results = json.loads(completed.stdout.strip().splitlines()[-1])

    def test_auto_mirrors_over_both_logical_cpus(self):
        self.assertLen(self.results["devices"], 2)
        self.assertEqual(self.results["replicas"], {"one": 1, "two": 2})

    def test_two_replicas_match_one_replica(self):
        one, two = self.results["ours_one"], self.results["ours_two"]
        for a, b in zip(one["weights"], two["weights"]):
            self.assertAllClose(a, b, atol=1e-6, rtol=0)
        for key in ("loss", "masked_accuracy", "perplexity"):
            self.assertAllClose(one["history"][key], two["history"][key], atol=1e-6, rtol=1e-6, msg=key)
        # The step did move the weights.
        self.assertGreater(np.abs(np.array(one["weights"][1]) - np.array(self.results["initial"][1])).max(), 0.01)

    def test_metrics_use_the_global_token_count(self):
        per_token, weight = np.array(self.results["per_token"]), np.array(self.results["sample_weight"])
        expected = np.exp((per_token * weight).sum() / weight.sum())
        self.assertAllClose(self.results["ours_two"]["history"]["perplexity"], expected, rtol=1e-5)

    def test_batches_split_unevenly_so_per_replica_normalisation_would_show(self):
        per_token, weight = np.array(self.results["per_token"]), np.array(self.results["sample_weight"])
        global_mean = (per_token * weight).sum() / weight.sum()
        halves = [(per_token[r] * weight[r]).sum() / weight[r].sum() for r in (slice(0, 2), slice(2, 4))]
        one, two = self.results["keras_one"]["history"]["loss"], self.results["keras_two"]["history"]["loss"]
        self.assertAllClose(one, global_mean, rtol=1e-5)
        # Keras' reduction on 2 replicas averages the two halves' means: the batch was split 2 + 2.
        self.assertAllClose(two, np.mean(halves), rtol=1e-5)
        self.assertGreater(abs(two - one), 0.05)
        kernel_one, kernel_two = (np.array(self.results[k]["weights"][1]) for k in ("keras_one", "keras_two"))
        self.assertGreater(np.abs(kernel_one - kernel_two).max(), 0.01)


class MakeStrategyTest(TestCase):
    def test_auto_without_cluster_uses_local_devices(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            strategy = make_strategy()
        self.assertIsInstance(strategy, tf.distribute.MirroredStrategy)
        expected = len(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))
        self.assertEqual(strategy.num_replicas_in_sync, expected)

    def test_auto_with_two_workers_is_multi_worker(self):
        cluster = {"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}
        with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(cluster)}), mock.patch.object(
            tf.distribute, "MultiWorkerMirroredStrategy", return_value="multi-worker"
        ):
            self.assertEqual(make_strategy("auto"), "multi-worker")

    def test_tf_config_worker_count(self):
        self.assertEqual(tf_config_worker_count(""), 0)
        self.assertEqual(tf_config_worker_count('{"cluster": {"worker": ["a:1"]}}'), 1)
        self.assertEqual(tf_config_worker_count('{"cluster": {"chief": ["a:1"], "worker": ["b:1"]}}'), 2)
        with self.assertRaisesRegex(ConfigError, "TF_CONFIG"):
            tf_config_worker_count("not json")

    def test_one_device(self):
        strategy = make_strategy("one_device")
        self.assertEqual(strategy.num_replicas_in_sync, 1)

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ConfigError, "Received: kind='tpu'"):
            make_strategy("tpu")
        with self.assertRaisesRegex(ConfigError, "exactly one device"):
            make_strategy("one_device", devices=["/cpu:0", "/cpu:0"])
        with self.assertRaisesRegex(ConfigError, "Received: num_devices=0"):
            split_cpu_for_testing(0)

    def test_split_after_initialisation_is_a_clear_error(self):
        tf.config.list_logical_devices("CPU")  # initialises the devices
        count = len(tf.config.list_logical_devices("CPU"))
        with self.assertRaisesRegex(RuntimeError, "already initialised"):
            split_cpu_for_testing(count + 1)
        self.assertLen(split_cpu_for_testing(count), count)  # no change asked: fine


if __name__ == "__main__":
    if "--child" in sys.argv:
        child_main()
    else:
        tf.test.main()
