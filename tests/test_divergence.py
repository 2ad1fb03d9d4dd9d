"""A diverging loss: caught in the graph at its step, its update not applied; the run stops or rolls back.

One replica: a float32 run rolls back (and, interrupted inside its recovery, resumes exactly), a mixed_bfloat16 run
stops. Two replicas: a mixed_bfloat16 run rolls back a loss spike and recovers in float32.

Runs are made to diverge on purpose by a test callback that, before one update, sets the embedding to NaN (a NaN
loss) or multiplies it (a loss spike), the way a poisoned batch or a burst of large updates would. Two replicas
need the CPU split before TensorFlow starts, so those runs train in a child process
(`python -m tests.test_divergence --child DIR`), which prints JSON.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from tests.helpers import TestCase, long_check, one_bucket_config, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
# A toy run: checkpoints every 3 updates; the embedding is poisoned before update 8; a rollback goes back to step 6,
# skips the eighth batch and trains updates 7 to 9 at half the rate.
STEPS, POISONED, RECOVERY = 12, 8, 3
SETTINGS = dict(train_steps=STEPS, steps_per_epoch=4, checkpoint_every_steps=3, rollback_steps=RECOVERY,
                spike_window=20, spike_min_steps=4)


class Poison(keras.callbacks.Callback):
    """Before update `step` (once): the embedding times `factor` (NaN: a NaN loss; a large number: a loss spike)."""

    def __init__(self, step=POISONED, factor=float("nan")):
        super().__init__()
        self.step, self.factor, self.done = step, factor, False

    def on_train_batch_begin(self, batch, logs=None):
        if not self.done and int(self.model.optimizer.iterations.numpy()) == self.step - 1:
            embedding = self.model.trainable_weights[0]
            embedding.assign(embedding * self.factor)
            self.done = True


def checkpoint_summary(run_dir):
    """Steps of the run's checkpoints, whether the newest holds finite weights, and its input position."""
    from t2t_keras.runs import checkpoint_paths, checkpoint_step

    paths = checkpoint_paths(pathlib.Path(run_dir) / "checkpoints")
    names = [name for name, _ in tf.train.list_variables(paths[-1])]
    finite = all(np.all(np.isfinite(tf.train.load_variable(paths[-1], n))) for n in names if n.startswith("model/"))
    position = int(tf.train.load_variable(paths[-1], "input_position/.ATTRIBUTES/VARIABLE_VALUE"))
    return {"steps": [checkpoint_step(p) for p in paths], "finite": finite, "position": position}


def run_config(files, **training):
    return one_bucket_config(files, **{**SETTINGS, **training})


def write_corpus(directory):
    return write_toy_corpus(directory, train=160, max_words=3)


def diverging_run(files, run_dir, on_divergence, precision, factor=float("nan"), **settings):
    """Trains the toy run with the poison; `{"error": message or None, "events": [...], "checkpoints": ...}`."""
    from t2t_keras.resolved_run import resolve_run
    from t2t_keras.runs import RunDirectory
    from t2t_keras.training.recovery import TrainingDiverged
    from t2t_keras.training.trainer import train

    config = run_config(files, on_divergence=on_divergence, mixed_precision=precision, **settings)
    error = final_step = None
    try:
        final_step = train(resolve_run(run_dir, config), callbacks=[Poison(factor=factor)], verbose=0).final_step
    except TrainingDiverged as stopped:
        error = str(stopped)
    run = RunDirectory(run_dir)
    return {"error": error, "final_step": final_step, "events": run.read_json_lines(run.divergence_path),
            "checkpoints": checkpoint_summary(run_dir)}


def child_main(directory):
    """On two replicas (the CPU split in two): a mixed_bfloat16 run that rolls back after a loss spike."""
    from t2t_keras.training.strategy import split_cpu_for_testing

    split_cpu_for_testing(2)
    files = write_corpus(pathlib.Path(directory) / "data")
    rollback = diverging_run(files, pathlib.Path(directory) / "rollback", "rollback", "mixed_bfloat16", factor=30.0)
    print(json.dumps({"rollback": rollback, "replicas": len(tf.config.list_logical_devices("CPU"))}))


class GuardVerdictTest(TestCase):
    """`guard.verdict` and `window_statistics` against numpy."""

    def test_window_statistics_are_those_of_the_losses_written(self):
        from t2t_keras.training.guard import window_statistics

        window = tf.constant([3.0, 2.0, 4.0, 0.0, 0.0])
        count, mean, deviation = window_statistics(window, tf.constant(3, tf.int64))
        self.assertEqual(int(count), 3)
        self.assertAllClose([mean, deviation], [3.0, np.std([3.0, 2.0, 4.0])])
        count, mean, _ = window_statistics(window, tf.constant(7, tf.int64))  # wrapped: all five written
        self.assertEqual(int(count), 5)
        self.assertAllClose(mean, 9.0 / 5)

    def test_each_kind_of_divergence(self):
        from t2t_keras.training.guard import NON_FINITE_GRADIENT_NORM, NON_FINITE_LOSS, SPIKE, verdict

        window, seen = tf.constant([3.0, 2.9, 3.1, 3.0]), tf.constant(4, tf.int64)

        def kind(loss, norm, deviations=6.0, min_steps=4):
            return int(verdict(tf.constant(loss), tf.constant(norm), window, seen, deviations, min_steps)[0])

        self.assertEqual(kind(3.2, 1.0), 0)  # within 6 deviations (0.07) of 3.0
        self.assertEqual(kind(np.nan, 1.0), NON_FINITE_LOSS)
        self.assertEqual(kind(np.inf, np.nan), NON_FINITE_LOSS)  # the loss first
        self.assertEqual(kind(3.0, np.inf), NON_FINITE_GRADIENT_NORM)
        self.assertEqual(kind(3.9, 1.0), SPIKE)
        self.assertEqual(kind(3.9, 1.0, deviations=None), 0)  # no spike test
        self.assertEqual(kind(3.9, 1.0, min_steps=5), 0)  # too few losses yet


class GuardedStepTest(TestCase):
    """The guarded train step on one device: a sound run trains exactly as Keras' own step; an unsound update is
    not applied, and no later one either until the record is cleared."""

    @classmethod
    def setUpClass(cls):
        from tests.test_exact_training import micro_batches, one_batch

        cls.dataset = tf.data.Dataset.from_tensors(one_batch(micro_batches())).repeat(4)  # one shape: one trace

    def compiled(self, guarded):
        from t2t_keras.config import load_config
        from t2t_keras.training.guard import DivergenceGuard
        from t2t_keras.training.trainer import compile_model

        config = load_config("tiny", ["data.vocab_size=50", "model.hidden_dim=16", "model.intermediate_dim=32",
                                      "model.num_layers=1", "model.dropout=0.0", "training.jit_compile=false",
                                      "training.spike_window=4", "training.spike_min_steps=2"])
        keras.utils.set_random_seed(1)
        strategy = tf.distribute.get_strategy()
        guard = DivergenceGuard.create(strategy, config.training) if guarded else None
        return compile_model(config, strategy, guard), guard

    def test_a_sound_run_trains_exactly_as_keras_own_step(self):
        (plain, _), (guarded, guard) = self.compiled(False), self.compiled(True)
        guarded.set_weights(plain.get_weights())
        for model in (plain, guarded):
            model.fit(self.dataset, epochs=1, verbose=0)
        self.assertEqual(int(guarded.optimizer.iterations.numpy()), 4)
        for a, b in zip(plain.get_weights(), guarded.get_weights()):
            self.assertAllEqual(a, b)
        self.assertEqual(float(guard.event[0].numpy()), 0.0)
        self.assertEqual(int(guard.seen.numpy()), 4)

    def test_an_unsound_update_is_not_applied_and_later_ones_wait(self):
        model, guard = self.compiled(True)
        model.fit(self.dataset, epochs=1, verbose=0)
        before = model.get_weights()
        embedding = model.trainable_weights[0]
        embedding.assign(embedding * 1e3)  # a loss spike
        spiked = model.get_weights()
        model.fit(self.dataset.take(2), epochs=1, verbose=0)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 4)  # neither update applied
        for a, b in zip(spiked, model.get_weights()):
            self.assertAllEqual(a, b)
        kind, loss, mean, _, norm = guard.event.numpy()
        self.assertEqual(kind, 3)
        self.assertGreater(loss, mean)
        self.assertTrue(np.isfinite(norm))
        guard.reset()
        model.set_weights(before)
        model.fit(self.dataset.take(1), epochs=1, verbose=0)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 5)


@long_check
class DivergingRunTest(TestCase):
    """`train` on one replica with a poisoned update, under float32 and mixed_bfloat16, and on two replicas."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_corpus(cls.root / "data")
        cls.rollback = diverging_run(cls.files, cls.root / "rollback", "rollback", "float32")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_stop_leaves_the_last_good_checkpoint(self):
        run_dir = self.root / "stop"
        stopped = diverging_run(self.files, run_dir, "stop", "mixed_bfloat16")
        self.assertIn(f"diverged at step {POISONED}: NaN loss", stopped["error"])
        self.assertIn("training.on_divergence=stop", stopped["error"])
        self.assertIn(f"last good checkpoint, step {POISONED - 2}", stopped["error"])
        self.assertEqual(stopped["checkpoints"], {"steps": [3, 6], "finite": True, "position": 6})
        [event] = stopped["events"]
        self.assertEqual((event["step"], event["found"], event["action"]), (POISONED, "nan_loss", "stop"))
        from tests.test_training import event_tags

        self.assertIn("divergence_events", event_tags(run_dir / "logs" / "train"))
        from t2t_keras.runs import load_run_model

        weights = load_run_model(run_dir, "latest").get_weights()
        self.assertTrue(all(np.all(np.isfinite(w)) for w in weights))

    def test_rollback_skips_the_batch_and_goes_on(self):
        self.assertIsNone(self.rollback["error"])
        self.assertEqual(self.rollback["final_step"], STEPS)
        [event] = self.rollback["events"]
        self.assertEqual((event["step"], event["found"], event["action"]), (POISONED, "nan_loss", "rollback"))
        self.assertEqual(event["rolled_back_to"], 6)
        self.assertEqual(event["skipped_micro_batches"], [POISONED - 1, POISONED])
        self.assertEqual(event["recovery"], {"until_step": 6 + RECOVERY, "learning_rate_factor": 0.5})
        # The newest checkpoint finite; one micro-batch more consumed than updates made (the one skipped).
        self.assertEqual(self.rollback["checkpoints"], {"steps": [3, 6, 9, 12], "finite": True,
                                                        "position": STEPS + 1})

    def test_a_rollback_resumed_midway_ends_like_the_uninterrupted_run(self):
        from t2t_keras.resolved_run import resolve_run
        from t2t_keras.training.trainer import train
        from tests.test_exact_training import checkpoint_weights

        run_dir = self.root / "resumed"
        stopped = diverging_run(self.files, run_dir, "rollback", "float32", train_steps=POISONED)
        self.assertEqual(stopped["final_step"], POISONED)  # inside the recovery, which the next session resumes
        self.assertEqual(stopped["checkpoints"]["steps"], [3, 6, POISONED])
        train(resolve_run(run_dir, run_config(self.files, on_divergence="rollback")), verbose=0)
        reference = checkpoint_weights(self.root / "rollback", STEPS)
        for name, value in checkpoint_weights(run_dir, STEPS).items():
            self.assertAllClose(value, reference[name], atol=1e-6, rtol=0, msg=name)

    def test_two_replicas_roll_back_a_spike_in_float32(self):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        env.pop("TF_CONFIG", None)
        directory = self.root / "replicas"
        completed = subprocess.run([sys.executable, "-m", "tests.test_divergence", "--child", str(directory)],
                                   cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        results = json.loads(completed.stdout.strip().splitlines()[-1])
        self.assertEqual(results["replicas"], 2)
        rollback = results["rollback"]
        self.assertIsNone(rollback["error"])
        [event] = rollback["events"]
        self.assertEqual((event["step"], event["found"], event["action"]), (POISONED, "spike", "rollback"))
        self.assertGreater(event["loss"], event["running_mean"])
        self.assertEqual(event["recovery"], {"until_step": 6 + RECOVERY, "mixed_precision": "float32"})
        self.assertEqual(rollback["checkpoints"], {"steps": [3, 6, 9, 12], "finite": True, "position": STEPS + 1})


if __name__ == "__main__":
    if "--child" in sys.argv:
        child_main(sys.argv[sys.argv.index("--child") + 1])
