"""`resolve_run`: what a user gives becomes one checked config, once; the run stores it and the trainer reads it."""

import contextlib
import pathlib
import tempfile
from unittest import mock

import yaml

from t2t_keras import config as config_lib
from t2t_keras import config_paths, pipeline, resolved_run
from t2t_keras.config import available_presets, load_config
from t2t_keras.errors import ConfigError
from t2t_keras.resolved_run import InitSource, ResolvedRun, init_source, resolve_run
from t2t_keras.runs import RunDirectory
from t2t_keras.training import trainer
from tests.helpers import TestCase, cli_in_process, write_toy_corpus


def saved(resolved):
    """`resolved.config` stored by its run, and read back by another `RunDirectory` of the same path."""
    resolved.run.save_config(resolved.config)
    return RunDirectory(resolved.run.path).load_config()


class ResolvedRunTest(TestCase):
    def setUp(self):
        self.root = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))

    def test_every_preset_resolves_without_writing_to_the_config_its_run_loads_back(self):
        for preset in available_presets():
            with self.subTest(preset=preset):
                resolved = resolve_run(self.root / preset, preset)
                self.assertIsInstance(resolved, ResolvedRun)
                self.assertFalse(resolved.run.path.exists(), "resolving writes nothing")
                self.assertEqual(resolved.config, load_config(preset))
                self.assertEqual(saved(resolved), resolved.config)
                self.assertIs(resolved.run.load_config(), resolved.config)  # stored, not resolved again

    def test_a_run_that_exists_keeps_its_model_and_data_and_takes_new_training_and_decoding_settings(self):
        saved(resolve_run(self.root / "run", "tiny"))
        changed = resolve_run(self.root / "run", "tiny", ["training.train_steps=9", "decoding.beam_size=2"])
        self.assertEqual((changed.config.training.train_steps, changed.config.decoding.beam_size), (9, 2))
        own = resolve_run(self.root / "run", None, ["training.train_steps=7"])  # no config: the run's own
        self.assertEqual(own.config, config_lib.replace(load_config("tiny"), training={"train_steps": 7}))
        with self.assertRaisesRegex(ConfigError, r"different model config \(model.num_layers: 2 -> 1\)"):
            resolve_run(self.root / "run", "tiny", ["model.num_layers=1"])
        with self.assertRaisesRegex(ConfigError, "trained with training.lora_rank=null"):
            resolve_run(self.root / "run", "tiny", ["training.lora_rank=2"])
        new = resolve_run(self.root / "new", None)  # a new run without a config: the preset `new_run`
        self.assertEqual(new.config, load_config("base"))

    def test_data_paths_are_absolute_and_those_inside_the_run_are_stored_relative_to_it(self):
        run_dir = self.root / "run"
        (run_dir / "distilled").mkdir(parents=True)
        (run_dir / "distilled" / "train.src").write_text("a\n", encoding="utf-8")
        (self.root / "here.tgt").write_text("a\n", encoding="utf-8")
        with contextlib.chdir(self.root):  # --set paths are read from the current directory
            resolved = resolve_run(run_dir, "tiny", ["data.source=text",
                                                     "data.train_files=[run/distilled/train.src,here.tgt]"])
        expected = [str(run_dir / "distilled" / "train.src"), str(self.root / "here.tgt")]
        self.assertEqual(resolved.config.data.train_files, expected)
        self.assertEqual(saved(resolved).data.train_files, expected)
        stored = yaml.safe_load((run_dir / config_paths.RUN_CONFIG_FILE).read_text(encoding="utf-8"))
        self.assertEqual(stored["data"]["train_files"], ["distilled/train.src", str(self.root / "here.tgt")])

    def test_init_from_gives_the_trained_run_s_model_and_vocabulary_and_may_have_fewer_layers(self):
        saved(resolve_run(self.root / "teacher", "tiny", ["model.hidden_dim=32", "model.num_layers=3"]))
        source = init_source(self.root / "teacher", None, ["model.num_layers=1"])
        child = resolve_run(self.root / "child", "tiny", ["model.num_layers=1"], source)
        self.assertEqual((child.config.model.hidden_dim, child.config.model.num_layers), (32, 1))
        self.assertEqual((child.init_from.run, child.init_from.weights), (self.root / "teacher", "auto"))
        with self.assertRaisesRegex(ConfigError, "model.hidden_dim=8 here"):
            resolve_run(self.root / "child", "tiny", ["model.hidden_dim=8"],
                        InitSource(self.root / "teacher", overrides=("model.hidden_dim=8",)))
        with self.assertRaisesRegex(ConfigError, "names the run being trained"):
            resolve_run(self.root / "teacher", None, init_from=InitSource(self.root / "teacher"))
        with self.assertRaisesRegex(ConfigError, "give --init-from too"):
            init_source(None, "latest")


class TrainedOnceTest(TestCase):
    """`t2t-keras train` resolves its configuration once; the trainer and the run read that object."""

    def test_train_resolves_once_and_the_run_stores_what_was_resolved(self):
        root = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        files = write_toy_corpus(root / "data", train=120, dev=8, test=8, max_words=3)
        sets = ["data.source=text", "data.vocab_size=100", "data.max_length=8", "data.batch_tokens=384",
                "model.num_layers=1", "training.train_steps=1", "training.steps_per_epoch=1",
                "training.checkpoint_every_steps=1", "training.jit_compile=false",
                *(f"data.{split}_files=[{paths[0]},{paths[1]}]" for split, paths in files.items())]
        first = self._train(root / "run", "--config", "tiny", *[arg for value in sets for arg in ("--set", value)])
        stored = yaml.safe_load((root / "run" / config_paths.RUN_CONFIG_FILE).read_text(encoding="utf-8"))
        written = first.config.to_dict()
        written["data"] = config_paths.for_run(written["data"], root / "run")
        self.assertEqual(stored, written)
        again = self._train(root / "run", "--set", "decoding.beam_size=2")  # the run's own config, resumed
        self.assertEqual(again.config, config_lib.replace(first.config, decoding={"beam_size": 2}))

    def _train(self, run_dir, *args):
        """The `ResolvedRun` of `t2t-keras train --run-dir RUN_DIR ARGS`, which must be the only one made; the
        trainer takes that very object, its run holds that very config, and nothing parses a config after it."""
        made, original = [], resolved_run.resolve_run
        with contextlib.ExitStack() as after:
            def resolve_once(*given, **options):
                self.assertEqual(made, [], "resolved twice")
                made.append(original(*given, **options))
                after.enter_context(mock.patch.object(config_lib, "from_dict", side_effect=AssertionError("parsed")))
                return made[-1]

            def train(resolved, **options):
                self.assertIs(resolved, made[0])
                result = trainer.train(resolved, **options)
                self.assertIs(resolved.run.load_config(), resolved.config)
                return result

            after.enter_context(mock.patch.object(resolved_run, "resolve_run", resolve_once))
            after.enter_context(mock.patch.object(pipeline, "train", train))
            result = cli_in_process("train", "--run-dir", run_dir, *args)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertEqual(len(made), 1)
        return made[0]


class MadeMeanwhileTest(TestCase):
    """Resolving reads and writes nothing, and comes before the run's lock: a run that another command made after it
    was resolved as new is refused under the lock, before anything is written over that run's config."""

    def test_a_run_made_after_it_was_resolved_as_new_is_refused_and_left_as_it_was(self):
        root = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        resolved = resolve_run(root / "run", "tiny")
        self.assertTrue(resolved.new)
        saved(resolve_run(root / "run", "tiny", ["model.hidden_dim=32"]))  # the other command's run
        before = (root / "run" / config_paths.RUN_CONFIG_FILE).read_bytes()
        with self.assertRaisesRegex(ConfigError, r"made by another command after this one read its settings: run "
                                                 r"the command again"):
            trainer.train(resolved, minutes=0.1)
        self.assertEqual((root / "run" / config_paths.RUN_CONFIG_FILE).read_bytes(), before)
        self.assertFalse(resolve_run(root / "run", "tiny", ["model.hidden_dim=32"]).new)
