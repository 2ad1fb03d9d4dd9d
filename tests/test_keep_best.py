"""Keep the best, stop early (issue 14): RUN/best/ follows training.best_metric, patience ends a run,
a resumed run keeps comparing against the earlier best, and average/evaluate/export take --checkpoint best."""

import json
import pathlib
import shutil
import tempfile
import types
from unittest import mock

import tensorflow as tf

from t2t_keras.config import replace
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory, checkpoint_paths, load_run_model
from t2t_keras.training.keep_best import BestState, KeepBest
from t2t_keras.training.trainer import train
from tests.helpers import (
    TestCase,
    cli_in_process,
    long_check,
    one_bucket_config,
    tiny_transformer,
    toy_config,
    write_toy_corpus,
)
from tests.test_training import event_tags


def fake_fit(callback, model, scores, metric):
    """Drives `callback` as `fit` would, one update per score; the first weight holds the step number."""
    optimizer = types.SimpleNamespace(iterations=tf.Variable(0, dtype=tf.int64))
    callback.set_model(types.SimpleNamespace(optimizer=optimizer, stop_training=False,
                                             trainable_variables=model.trainable_variables))
    callback.on_train_begin()
    for step, score in enumerate(scores, start=1):
        optimizer.iterations.assign(step)
        model.trainable_variables[0].assign(tf.fill(model.trainable_variables[0].shape, float(step)))
        callback.evaluate = lambda score=score: {metric: score, "other": 0.0}
        callback.on_train_batch_end(step - 1)
        if callback.model.stop_training:
            break
    callback.on_train_end()
    return int(optimizer.iterations.numpy())


class ScriptedKeepBestTest(TestCase):
    """A metric sequence we choose, through the real RunDirectory.write_best."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = RunDirectory(self.tmp.name)
        self.model = tiny_transformer()
        self.writes = []

    def tearDown(self):
        self.tmp.cleanup()

    def keep_best(self, metric, patience=0, state=None):
        def write_best(model, info):
            self.writes.append(info["step"])
            self.run.write_best(self.model, info)

        return KeepBest(None, state or BestState(), write_best, every_steps=1, metric=metric, patience=patience,
                        log_dir=pathlib.Path(self.tmp.name) / "logs" / "eval")

    def best_marker(self):
        """The step whose weights RUN/best/ holds (the first weight is filled with its step number)."""
        model = load_best_weights(self.run)
        return float(model.trainable_variables[0].numpy().flat[0])

    def test_bleu_best_is_replaced_only_on_improvement(self):
        stopped_at = fake_fit(self.keep_best("bleu"), self.model, [10.0, 12.0, 11.0, 12.0, 13.0, 9.0], "bleu")
        self.assertEqual(stopped_at, 6)
        self.assertEqual(self.writes, [1, 2, 5])  # 12 again is no improvement
        info = self.run.read_json(self.run.best_info_path)
        self.assertEqual((info["step"], info["metric"], info["value"]), (5, "bleu", 13.0))
        self.assertEqual(self.best_marker(), 5.0)
        self.assertFalse([p for p in pathlib.Path(self.tmp.name).iterdir() if p.name.startswith(".")])  # no debris

    def test_loss_best_is_the_lowest(self):
        fake_fit(self.keep_best("loss"), self.model, [3.0, 2.5, 2.7, 2.4, 2.4], "loss")
        self.assertEqual(self.writes, [1, 2, 4])
        self.assertEqual(self.run.read_json(self.run.best_info_path)["value"], 2.4)
        self.assertEqual(self.best_marker(), 4.0)

    def test_patience_stops_after_that_many_evaluations_without_improvement(self):
        with self.assertLogs("t2t_keras.training.keep_best", "INFO") as logs:
            stopped_at = fake_fit(self.keep_best("bleu", patience=2), self.model, [5.0, 7.0, 6.0, 7.0, 8.0], "bleu")
        self.assertEqual(stopped_at, 4)
        self.assertTrue(any("Early stopping at step 4" in line and "not improved for 2 evaluations" in line
                            for line in logs.output), logs.output)

    def test_dev_scalars_go_to_tensorboard(self):
        fake_fit(self.keep_best("bleu"), self.model, [1.0, 2.0], "bleu")
        self.assertLessEqual({"dev_bleu", "dev_other"}, event_tags(pathlib.Path(self.tmp.name) / "logs" / "eval"))

    def test_a_restored_state_compares_against_the_earlier_best(self):
        state = BestState()
        fake_fit(self.keep_best("bleu", state=state), self.model, [5.0, 7.0], "bleu")
        restored = BestState()
        path = tf.train.Checkpoint(best=state).write(str(pathlib.Path(self.tmp.name) / "state"))
        tf.train.Checkpoint(best=restored).read(path).assert_consumed()
        self.writes.clear()
        callback = self.keep_best("bleu", patience=2, state=restored)
        stopped_at = fake_fit(callback, self.model, [6.0, 6.5, 9.0], "bleu")
        self.assertEqual(self.writes, [])  # 6 and 6.5 are below the restored best 7
        self.assertEqual(stopped_at, 2)
        self.assertEqual(int(restored.stale.numpy()), 2)


def load_best_weights(run):
    path, _ = run.best_checkpoint()
    model = tiny_transformer()
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    return model


class ScriptedEvaluator:
    """Stands in for DevEvaluator inside `train`: BLEU by step from SCRIPT, loss fixed."""

    SCRIPT = {}

    def __init__(self, model, *args, **kwargs):
        self.model = model

    def __call__(self):
        return {"bleu": self.SCRIPT[int(self.model.optimizer.iterations.numpy())], "loss": 1.0}


@long_check
class ResumeKeepsTheBestTest(TestCase):
    def test_patience_counts_across_a_resume_and_a_stopped_run_stays_stopped(self):
        with tempfile.TemporaryDirectory() as tmp:
            files = write_toy_corpus(pathlib.Path(tmp) / "data", train=120, max_words=3)
            # One bucket shape (each `train` traces its steps once); the dev split that eval_every_steps needs.
            config = replace(one_bucket_config(files, train_steps=6, steps_per_epoch=3, checkpoint_every_steps=100,
                                               eval_every_steps=2, early_stopping_patience=2),
                             data={"dev_files": files["dev"]})
            run_dir = pathlib.Path(tmp) / "run"
            ScriptedEvaluator.SCRIPT = {2: 5.0, 4: 7.0, 6: 6.0, 8: 6.5, 10: 9.0, 12: 9.5}
            with mock.patch("t2t_keras.training.fitting.DevEvaluator", ScriptedEvaluator):
                first = train(resolve_run(run_dir, config), verbose=0)
                self.assertEqual(first.final_step, 6)
                self.assertEqual(RunDirectory(run_dir).read_json(RunDirectory(run_dir).best_info_path)["step"], 4)
                longer = replace(config, training={"train_steps": 12})
                with self.assertLogs("t2t_keras.training.keep_best", "INFO") as logs:
                    resumed = train(resolve_run(run_dir, longer), verbose=0)
                # 6.5 at step 8 is a second evaluation below 7 (step 4): without the restored best it would be one.
                self.assertEqual((resumed.start_step, resumed.final_step), (6, 8))
                self.assertTrue(any("Early stopping at step 8" in line for line in logs.output), logs.output)
                self.assertEqual(RunDirectory(run_dir).read_json(RunDirectory(run_dir).best_info_path)["step"], 4)
                again = train(resolve_run(run_dir, longer), verbose=0)
                self.assertEqual((again.start_step, again.final_step), (8, 8))  # stays stopped


class OlderCheckpointTest(TestCase):
    def test_a_checkpoint_without_the_best_state_resumes_with_a_fresh_one(self):
        import keras

        from t2t_keras.training.checkpoints import CheckpointManager

        def model_and_optimizer():
            model, optimizer = tiny_transformer(), keras.optimizers.Adam()
            optimizer.build(model.trainable_variables)
            return model, optimizer

        with tempfile.TemporaryDirectory() as tmp:
            CheckpointManager(tmp, *model_and_optimizer(),
                              extra_state={"input_position": tf.Variable(7, dtype=tf.int64)}).save()
            position, best = tf.Variable(-1, dtype=tf.int64), BestState()
            manager = CheckpointManager(tmp, *model_and_optimizer(), extra_state={"input_position": position,
                                                                                  "best": best})
            with self.assertLogs("t2t_keras.training.checkpoints", "WARNING") as logs:
                manager.restore_latest()
        self.assertEqual(int(position.numpy()), 7)
        self.assertEqual(int(best.step.numpy()), -1)
        self.assertIn("holds no best", logs.output[0])


@long_check
class RealRunBestCheckpointTest(TestCase):
    """A real tiny run with dev BLEU every 3 updates; the CLI's --checkpoint best on it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        files = write_toy_corpus(root / "data", train=200, dev=12, max_words=3)  # short: few bucket shapes
        cls.config = toy_config(files, train_steps=9, steps_per_epoch=9, checkpoint_every_steps=100,
                                eval_every_steps=3, eval_sentences=8, best_metric="loss")
        cls.run_dir = root / "run"
        cls.result = train(resolve_run(cls.run_dir, cls.config), verbose=0)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def dev_scalars(self, tag):
        values = {}
        for path in (self.run_dir / "logs" / "eval").rglob("events.out.tfevents.*"):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                for value in event.summary.value:
                    if value.tag == tag:
                        values[event.step] = float(tf.make_ndarray(value.tensor))
        return values

    def cli(self, *args):
        result = cli_in_process(*args)
        return result.returncode, result.stdout.decode("utf-8"), result.stderr.decode("utf-8")

    def test_best_holds_the_lowest_dev_loss_and_its_weights(self):
        losses, bleus = self.dev_scalars("dev_loss"), self.dev_scalars("dev_bleu")
        self.assertEqual(sorted(losses), [3, 6, 9])
        self.assertEqual(sorted(bleus), [3, 6, 9])
        best_step = min(losses, key=losses.get)
        info = RunDirectory(self.run_dir).read_json(RunDirectory(self.run_dir).best_info_path)
        self.assertEqual((info["step"], info["metric"]), (best_step, "loss"))
        self.assertAlmostEqual(info["value"], losses[best_step], places=4)
        checkpoint = [p for p in checkpoint_paths(self.run_dir / "checkpoints") if p.endswith(f"-{best_step}")]
        self.assertTrue(checkpoint, "a checkpoint is written at every evaluation")
        best = load_run_model(self.run_dir, source="best")
        reference = tiny_like(self.config)
        tf.train.Checkpoint(model=reference).restore(checkpoint[0]).expect_partial()
        for a, b in zip(best.get_weights(), reference.get_weights()):
            self.assertAllEqual(a, b)

    def test_average_with_checkpoint_best_ends_at_the_best_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = shutil.copytree(self.run_dir, pathlib.Path(tmp) / "run")
            code, _, err = self.cli("average", "--run-dir", str(run_dir), "--last", "2", "--checkpoint", "best")
            self.assertEqual(code, 0, err)
            averaged = json.loads((run_dir / "averaged" / "averaged.json").read_text())
            best_step = RunDirectory(run_dir).read_json(RunDirectory(run_dir).best_info_path)["step"]
            self.assertEqual(averaged["steps"][-1], best_step)
            self.assertEqual(averaged["ending"], "best")
            self.assertEqual(len(averaged["steps"]), 2 if best_step > 3 else 1)

    def test_evaluate_and_export_use_the_best_checkpoint(self):
        code, out, err = self.cli("evaluate", "--run-dir", str(self.run_dir), "--model", "best", "--beam-size", "1",
                                  "--json", "--split", "dev")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out.strip().splitlines()[-1])["sentences"], 12)
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = pathlib.Path(tmp) / "export"
            code, _, err = self.cli("export", "--run-dir", str(self.run_dir), "--out", str(out_dir), "--model",
                                    "best", "--beam-size", "1", "--max-beam-size", "1")
            self.assertEqual(code, 0, err)
            import keras

            exported = keras.models.load_model(out_dir / "assets.extra" / "model.keras")
            best = load_run_model(self.run_dir, source="best")
            for a, b in zip(exported.get_weights(), best.get_weights()):
                self.assertAllEqual(a, b)

    def test_a_run_without_a_best_checkpoint_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = shutil.copytree(self.run_dir, pathlib.Path(tmp) / "run", ignore=shutil.ignore_patterns("best"))
            export = ["export", "--out", str(pathlib.Path(tmp) / "x")]
            for command in (["average"], ["evaluate", "--beam-size", "1"], export):
                best = ["--checkpoint" if command[0] == "average" else "--model", "best"]  # average: where it ends
                code, _, err = self.cli(command[0], "--run-dir", str(run_dir), *command[1:], *best)
                self.assertEqual(code, 2, command)
                self.assertIn("has no best checkpoint", err)
                self.assertIn("training.eval_every_steps", err)
            self.assertFalse((pathlib.Path(tmp) / "x").exists())


def tiny_like(config):
    from t2t_keras.model import build_transformer

    model = build_transformer(config.model)
    model.build()
    return model


if __name__ == "__main__":
    import unittest

    unittest.main()
