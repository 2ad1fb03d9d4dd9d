"""One road for every task: what a `Task` says about itself, the callbacks each gets, opening any artifact.

`lm-mini` and `mlm-mini` inherit `training.attention_every_steps: 1000` from `mini`. The attention summary draws
the encoder, decoder and cross attention of an encoder-decoder, so it must not be attached to single-stack
models (`tests/test_cli_tasks.py` trains both from the CLI past their attention-summary steps).
"""

import logging
import pathlib
import tempfile
import types

from t2t_keras.config import load_config
from t2t_keras.inspect.summary import RunAttentionSummary
from t2t_keras.pipeline import training_callbacks
from t2t_keras.runs import RunDirectory
from t2t_keras.tasks import TASKS, task_of
from t2t_keras.training.callbacks import ProgressLog
from tests.helpers import TestCase, cli_in_process, write_toy_corpus


def corpus_settings(files, batch_tokens=256):
    """`--set` arguments that train on the toy corpus the test wrote, with a 100-piece vocabulary."""
    settings = ["data.source=text", f"data.train_files={files['train']!r}", f"data.dev_files={files['dev']!r}",
                f"data.test_files={files['test']!r}", "data.vocab_size=100", "model.vocab_size=100",
                f"data.batch_tokens={batch_tokens}"]
    return [arg for setting in settings for arg in ("--set", setting)]


class TaskTableTest(TestCase):
    def test_each_preset_trains_the_task_of_its_architecture(self):
        for preset, name in (("mini", "translation"), ("lm-mini", "lm"), ("mlm-mini", "mlm")):
            task = task_of(load_config(preset))
            self.assertIs(task, TASKS[name])
            self.assertEqual(task.name, name)

    def test_only_translation_gets_the_attention_summary(self):
        self.assertEqual(load_config("lm-mini").training.attention_every_steps, 1000)  # inherited from mini
        self.assertEqual(load_config("mlm-mini").training.attention_every_steps, 1000)
        self.assertEqual(training_callbacks(TASKS["lm"], "run"), [])
        self.assertEqual(training_callbacks(TASKS["mlm"], "run"), [])
        callbacks = training_callbacks(TASKS["translation"], "run")
        self.assertEqual([type(callback) for callback in callbacks], [RunAttentionSummary])

    def test_what_each_task_generates_and_weighs(self):
        self.assertEqual({name: task.output for name, task in TASKS.items()},
                         {"translation": "translation", "lm": "continuation", "mlm": None})
        self.assertEqual([name for name, task in TASKS.items() if task.weighted_metrics], ["mlm"])

    def test_example_inputs_follow_the_stacks(self):
        self.assertEqual(TASKS["translation"].example_inputs("ids"), ("ids", "ids"))
        self.assertEqual(TASKS["lm"].example_inputs("ids"), "ids")
        self.assertEqual(TASKS["mlm"].example_inputs("ids"), "ids")


class TrainFromTheCommandLineTest(TestCase):
    """`t2t-keras train` on a corpus too small for one batch."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(cls.root / "data", train=200, dev=20, test=20)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, preset, run_dir, *settings, batch_tokens=256):
        return cli_in_process("train", "--config", preset, "--run-dir", run_dir,
                              *corpus_settings(self.files, batch_tokens), *settings)

    def test_a_corpus_smaller_than_one_batch_is_a_clear_error(self):
        result = self.train("lm-mini", self.root / "too-small", "--set", "training.train_steps=2",
                            batch_tokens=100_000)
        self.assertEqual(result.returncode, 2)
        self.assertIn("The training data gave no batch", result.stderr.decode())
        self.assertIn("Lower data.batch_tokens", result.stderr.decode())


class _Iterations:
    def __init__(self):
        self.value = 0

    def numpy(self):
        return self.value


class ProgressLogTest(TestCase):
    """One line per logging interval, for output that is not a terminal."""

    def setUp(self):
        self.iterations = _Iterations()
        self.callback = ProgressLog(every_steps=10, train_steps=100)
        self.callback.set_model(types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=self.iterations)))

    def steps(self, count, loss=2.5):
        for _ in range(count):
            self.iterations.value += 1
            self.callback.on_train_batch_end(0, {"loss": loss, "target_tokens": 100.0 * self.iterations.value})

    def test_one_line_per_interval_with_step_loss_speed_and_time_left(self):
        self.callback.on_train_begin()
        self.callback.on_epoch_begin(0)
        with self.assertLogs("t2t_keras.training.callbacks", logging.INFO) as logs:
            self.steps(25)
        self.assertEqual(len(logs.output), 2)
        self.assertRegex(logs.output[0], r"step 10/100  loss 2\.5000  \d+ target tokens/s  \d+s left")
        self.assertIn("step 20/100", logs.output[1])

    def test_validation_scores_are_one_line(self):
        with self.assertLogs("t2t_keras.training.callbacks", logging.INFO) as logs:
            self.callback.on_epoch_end(0, {"loss": 2.0, "val_loss": 1.5, "val_perplexity": 4.5,
                                           "val_target_tokens": 300.0})
        self.assertEqual(len(logs.output), 1)
        self.assertIn("loss 1.5000  perplexity 4.5000", logs.output[0])
        self.assertNotIn("target_tokens", logs.output[0])


class OpenArtifactTest(TestCase):
    """`artifacts.open_artifact`: one call for a run directory of any task (exports: the tests of each kind)."""

    def test_a_run_directory_opens_as_a_run_of_its_task(self):
        from t2t_keras.artifacts import open_artifact
        from t2t_keras.artifacts.run import RunArtifact
        from t2t_keras.errors import T2TError

        with tempfile.TemporaryDirectory() as tmp:
            for preset, task in (("mini", "translation"), ("lm-mini", "lm"), ("mlm-mini", "mlm")):
                run = RunDirectory(pathlib.Path(tmp) / preset)
                run.save_config(load_config(preset))
                artifact = open_artifact(run.path)
                self.assertIsInstance(artifact, RunArtifact)
                self.assertEqual((artifact.kind, artifact.task), ("run", task))
                self.assertEqual(artifact.max_length, load_config(preset).model.max_length)
            self.assertEqual(open_artifact(pathlib.Path(tmp) / "lm-mini").defaults.beam_size, 1)  # greedy
            with self.assertRaisesRegex(T2TError, "an mlm run does not generate: it does neither"):
                open_artifact(pathlib.Path(tmp) / "mlm-mini").request()
            with self.assertRaisesRegex(T2TError, "Sampling .* takes beam_size 1, not 4"):  # mini's beam is 4
                open_artifact(pathlib.Path(tmp) / "mini").request(temperature=1.0)
            self.assertTrue(open_artifact(pathlib.Path(tmp) / "mini").request(temperature=1.0, beam_size=1).sampling)
            with self.assertRaisesRegex(T2TError, "neither a run directory .* a SavedModel .* nor a LiteRT file"):
                open_artifact(pathlib.Path(tmp) / "nothing")


class ModelFamilyTest(TestCase):
    """What each task says its model supports is what the built model offers (`families`)."""

    def test_each_tasks_flags_match_its_models_family(self):
        from t2t_keras.build import build_model
        from t2t_keras.families import Inspectable, Searchable, check_searchable

        for preset in ("tiny", "lm-mini", "mlm-mini"):
            config = load_config(preset, ["model.hidden_dim=16", "model.num_heads=2", "model.intermediate_dim=16",
                                          "model.num_layers=1", "model.vocab_size=40"])
            task, model = task_of(config), build_model(config.model)
            with self.subTest(task=task.name):
                self.assertEqual(isinstance(model, Searchable), task.output is not None)
                self.assertEqual(isinstance(model, Inspectable), task.attention_summary)
        with self.assertRaisesRegex(Exception, "MaskedLanguageModel cannot be searched"):
            check_searchable(model)
