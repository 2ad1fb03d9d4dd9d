"""Training runs: checkpoints, resuming, averaging, logs, config checks.

A run killed with SIGKILL and started again is `test_exact_training.ExactResumeTest`."""

import pathlib
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.config import replace
from t2t_keras.errors import ConfigError, DataError
from t2t_keras.inspect.summary import RunAttentionSummary
from t2t_keras.model import build_transformer
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import average_run, checkpoint_paths, load_run_model
from t2t_keras.training.trainer import train
from tests.helpers import TestCase, cli_in_process, one_bucket_config, toy_config, write_toy_corpus


def event_tags(log_dir):
    """Scalar tags written under `log_dir`, read back with TensorFlow's event reader."""
    tags = set()
    for path in pathlib.Path(log_dir).rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    return tags


def restored_weights(config, path):
    model = build_transformer(config.model)
    model.build()
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    return model.get_weights()


class TrainingRunTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # Sentences of up to 3 words: the batches take two bucket shapes (8 and 12), so few traces of each step.
        cls.files = write_toy_corpus(pathlib.Path(cls.tmp.name) / "data", max_words=3)
        cls.config = toy_config(cls.files, attention_every_steps=6, attention_probes=1)
        cls.run_dir = pathlib.Path(cls.tmp.name) / "run"
        cls.first = train(resolve_run(cls.run_dir, cls.config), callbacks=[RunAttentionSummary(cls.run_dir)], verbose=0)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_run_directory_holds_config_vocabulary_checkpoints_and_provenance(self):
        self.assertEqual((self.first.start_step, self.first.final_step), (0, 6))
        for name in ("config.yaml", "tokenizer.model", "data.json"):
            self.assertTrue((self.run_dir / name).exists(), name)
        steps = [int(p.rsplit("-", 1)[1]) for p in checkpoint_paths(self.run_dir / "checkpoints")]
        self.assertEqual(steps, [3, 6])

    def test_tensorboard_scalars(self):
        train_tags = event_tags(self.run_dir / "logs" / "train")
        for tag in ("loss", "learning_rate", "tokens_per_second", "masked_accuracy", "perplexity"):
            self.assertIn(tag, train_tags)
        self.assertIn("epoch_val_loss", event_tags(self.run_dir / "logs" / "validation") | {
            t.replace("epoch_", "epoch_val_") for t in event_tags(self.run_dir / "logs" / "validation")})

    def test_attention_summaries_are_wired_in(self):
        tags = event_tags(self.run_dir / "logs" / "attention")
        for layer in range(2):
            self.assertIn(f"attention_entropy/cross/layer_{layer}", tags)
            self.assertIn(f"attention/encoder/layer_{layer}", tags)

    def test_restored_state_equals_the_trained_state(self):
        model = self.first.model
        fresh = load_run_model(self.run_dir, source="latest")
        for a, b in zip(model.get_weights(), fresh.get_weights()):
            self.assertAllClose(a, b)
        from t2t_keras.training.checkpoints import CheckpointManager
        from t2t_keras.training.trainer import compile_model

        clone = compile_model(self.config, tf.distribute.get_strategy())
        step = CheckpointManager(self.run_dir / "checkpoints", clone, clone.optimizer).restore_latest()
        self.assertEqual(step, 6)
        for a, b in zip(model.optimizer.variables, clone.optimizer.variables):
            self.assertAllClose(a, b)  # iterations, Adam moments
        self.assertAllClose(float(model.optimizer.learning_rate), float(clone.optimizer.learning_rate))

    def test_changed_model_config_is_refused(self):
        changed = replace(self.config, model={"hidden_dim": 32})
        with self.assertRaisesRegex(ConfigError, "model.hidden_dim: 64 -> 32"):
            train(resolve_run(self.run_dir, changed), verbose=0)

    def test_average_of_last_checkpoints_is_their_mean(self):
        path = average_run(self.run_dir, last=2)
        averaged = load_run_model(self.run_dir, source="averaged").get_weights()
        self.assertTrue(path.exists())
        a, b = (restored_weights(self.config, p) for p in checkpoint_paths(self.run_dir / "checkpoints")[-2:])
        for got, x, y in zip(averaged, a, b):
            self.assertAllClose(got, (x + y) / 2, atol=1e-6)

    def test_continuing_trains_from_the_last_step_with_the_runs_own_config(self):
        """Also: a half-written checkpoint is not taken as the latest, by `load_run_model` or by the resume."""
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = shutil.copytree(self.run_dir, pathlib.Path(tmp) / "run")  # the shared run stays at step 6
            # A write killed before the state file was updated leaves data files but no new entry.
            (run_dir / "checkpoints" / "ckpt-99.data-00000-of-00001").write_bytes(b"\0" * 10)
            model = load_run_model(run_dir, source="latest")
            self.assertEqual(checkpoint_paths(run_dir / "checkpoints")[-1].rsplit("-", 1)[1], "6",
                             "a half-written checkpoint is taken as the latest")
            self.assertTrue(all(np.isfinite(w).all() for w in model.get_weights()),
                            "the latest checkpoint beside a half-written one does not load whole")
            result = cli_in_process("train", "--run-dir", run_dir, "--set", "training.train_steps=9")  # no --config
            self.assertEqual(result.returncode, 0, result.stderr.decode()[-3000:])
            self.assertIn("from step 6 to 9", result.stdout.decode(),
                          "training does not go on from the last whole checkpoint with the run's own config")
            refused = cli_in_process("train", "--config", "tiny", "--run-dir", run_dir)  # its vocabulary is 100
            self.assertEqual(refused.returncode, 2)
            self.assertIn("vocab_size: 100 -> 1000", refused.stderr.decode())


class FirstSessionRetryTest(TestCase):
    def test_a_run_takes_another_batch_size_until_its_first_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            # One bucket shape and no dev split: the run traces its training step once.
            config = one_bucket_config(write_toy_corpus(f"{tmp}/data", train=120, dev=8, test=8, max_words=3),
                                       train_steps=3)
            with self.assertRaisesRegex(DataError, "fills no batch .*: lower data.batch_tokens"):
                train(resolve_run(f"{tmp}/run", replace(config, data={"batch_tokens": 2**16})), verbose=0)
            self.assertEqual(train(resolve_run(f"{tmp}/run", config), verbose=0).final_step, 3)  # the same run, as told
            with self.assertRaisesRegex(ConfigError, r"different data config \(data.batch_tokens: 384 -> 512\)"):
                train(resolve_run(f"{tmp}/run", replace(config, data={"batch_tokens": 512},
                                                        training={"train_steps": 6})), verbose=0)


if __name__ == "__main__":
    tf.test.main()
