"""Domain adaptation: `train --init-from RUN` starts a new run from a trained one, and `training.lora_rank` trains
low-rank adapters on its projections with every other weight frozen.

One tiny run is trained once (`setUpClass`); the adapted runs start from it.
"""

import json
import logging
import pathlib
import tempfile

import numpy as np
import tensorflow as tf
import yaml

from t2t_keras.adapters import add_adapters, is_adapter
from t2t_keras.artifacts import open_artifact
from t2t_keras.build import build_model
from t2t_keras.config import load_config, replace
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.describe import describe
from t2t_keras.errors import ConfigError
from t2t_keras.export.ctranslate2_export import export_ctranslate2_run
from t2t_keras.export.saved_model import export_run
from t2t_keras.params import adapter_parameters
from t2t_keras.resolved_run import InitSource, adopt, resolve_run
from t2t_keras.runs import average_run, load_export, load_run_model, open_run, weights_to_export
from t2t_keras.switches.clustering import xla_auto_clustering
from t2t_keras.training.fewer_layers import kept_layers
from t2t_keras.training.init_from import copy_tokenizer
from t2t_keras.training.trainer import _set_up, train
from tests.helpers import TestCase, best_texts, cli_in_process, long_check, random_ids, toy_config, write_toy_corpus

SENTENCES = ["the cat sees a dog", "a big red house", "the old man eats bread near the tree"]
GREEDY = GenerationRequest(beam_size=1, max_extra_length=8)


def by_path(variables):
    return {variable.path: np.asarray(variable) for variable in variables}


def adapters_in(config, checkpoint):
    """The adapters a checkpoint of a run of `config` holds, by path."""
    model = add_adapters(build_model(config.model), config.training.lora_rank)
    tf.train.Checkpoint(model=model).restore(str(checkpoint)).expect_partial()
    return {path: value for path, value in by_path(model.weights).items() if "lora_kernel" in path}


def set_up(config, run_dir, source):
    """What `train` sets up before its first step: `(Training, start step)`."""
    with xla_auto_clustering():  # `train` scopes the setting its set-up makes
        return _set_up(resolve_run(run_dir, config, init_from=source))


class LogLines(logging.Handler):
    """The INFO lines of one logger while the block runs."""

    def __init__(self, name):
        super().__init__(logging.INFO)
        self.logger, self.lines = logging.getLogger(name), []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def __enter__(self):
        self.level = self.logger.level
        self.logger.addHandler(self)
        self.logger.setLevel(logging.INFO)

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)


@long_check
class AdaptationTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        cls.files = write_toy_corpus(root / "data", train=200, dev=12, test=12)
        cls.base = root / "base"  # trained at a high constant rate, long enough to translate into something
        base = toy_config(cls.files, train_steps=24, steps_per_epoch=12, checkpoint_every_steps=24, learning_rate=0.01)
        train(resolve_run(cls.base, base), verbose=0)
        cls.base_model = weights_to_export(cls.base)[0]
        # The adapted run: rank-2 adapters on the base run's weights, 2 updates, then the same command again for 2
        # more: the second session resumes from the new run's own checkpoint.
        cls.lora_config = toy_config(cls.files, lora_rank=2, train_steps=4, checkpoint_every_steps=2,
                                     learning_rate=0.01)
        cls.lora = root / "lora"
        source = InitSource(cls.base)
        train(resolve_run(cls.lora, replace(cls.lora_config, training={"train_steps": 2}), init_from=source), verbose=0)
        logs = LogLines("t2t_keras.training.trainer")
        with logs:
            cls.resumed = train(resolve_run(cls.lora, cls.lora_config, init_from=source), verbose=0)
        cls.resume_log, cls.adapted = logs.lines, cls.resumed.model
        cls.uninterrupted = train(resolve_run(root / "lora-once", cls.lora_config, init_from=source), verbose=0).model

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def adapted_translations(self, tokenizer):
        """Greedy translations of SENTENCES by the adapted model as it trained (adapters not merged)."""
        if not hasattr(type(self), "translations"):
            type(self).translations = best_texts(Generator(self.adapted, tokenizer, jit_compile=False), SENTENCES,
                                                 GREEDY)
            self.assertTrue(all(type(self).translations), type(self).translations)  # something to compare
        return type(self).translations

    # --init-from

    def test_a_new_run_starts_at_step_0_from_the_weights_export_takes(self):
        training, start = set_up(toy_config(self.files), self.root / "fresh", InitSource(self.base))
        self.assertEqual(start, 0)
        self.assertEqual(int(training.model.optimizer.iterations.numpy()), 0)
        theirs, ours = by_path(self.base_model.trainable_weights), by_path(training.model.trainable_weights)
        self.assertEqual(set(ours), set(theirs))
        for path, value in theirs.items():
            self.assertAllEqual(ours[path], value, path)
        record = json.loads((self.root / "fresh" / "init_from.json").read_text())
        self.assertEqual((record["run"], record["source"], record["steps"]), (str(self.base), "latest", [24]))

    def test_it_keeps_the_run_s_model_tokenizer_and_vocabulary(self):
        config = toy_config(self.files)  # not given on purpose (no --set): taken from the run, silently
        config = replace(config, data={"vocab_size": 120}, model={"vocab_size": 120, "dropout": 0.3})
        new = open_run(self.root / "vocabulary")
        config = adopt(config, InitSource(self.base), new)
        self.assertEqual((config.data.vocab_size, config.model.vocab_size, config.model.dropout), (100, 100, 0.1))
        self.assertEqual(config.model, open_run(self.base).load_config().model)
        copy_tokenizer(InitSource(self.base), new, config)
        self.assertEqual((self.root / "vocabulary" / "tokenizer.model").read_bytes(),
                         (self.base / "tokenizer.model").read_bytes())
        self.assertEqual((self.lora / "tokenizer.model").read_bytes(),  # as `train` copies it
                         (self.base / "tokenizer.model").read_bytes())

    def test_a_model_setting_that_differs_is_refused_naming_the_key(self):
        result = cli_in_process("train", "--config", "tiny", "--run-dir", self.root / "wider", "--init-from", self.base,
                                "--set", "model.hidden_dim=32", "--set", "model.num_layers=2")
        self.assertEqual(result.returncode, 2)
        error = result.stderr.decode()
        self.assertIn(f"model.hidden_dim=32 here, 64 in {self.base}", error)
        self.assertIn("Remove --set model.hidden_dim", error)
        self.assertNotIn("model.num_layers=2 here", error)  # the same as the run's: allowed
        self.assertFalse((self.root / "wider").exists())

    def test_fewer_layers_start_from_the_run_s_layers_evenly_spaced(self):
        """Shrink and fine-tune: a one-layer decoder starts from the run's first decoder layer, every other weight
        from the same weight of the run; more layers than the run's are refused."""
        config = replace(toy_config(self.files), model={"num_decoder_layers": 1})
        source = InitSource(self.base, overrides=("model.num_decoder_layers=1",))
        training, start = set_up(config, self.root / "shallow", source)
        self.assertEqual((start, len(training.model.decoder.blocks), len(training.model.encoder.blocks)), (0, 1, 2))
        theirs, ours = by_path(self.base_model.trainable_weights), by_path(training.model.trainable_weights)
        self.assertEqual(len(theirs) - len(ours), sum("decoder/block_1/" in path for path in theirs))
        for path, value in ours.items():
            self.assertAllEqual(value, theirs[path], path)  # decoder block_0 <- block_0; the rest unchanged
        record = json.loads((self.root / "shallow" / "init_from.json").read_text())
        self.assertEqual(record["layers"], {"decoder": [0]})
        result = cli_in_process("train", "--config", "tiny", "--run-dir", self.root / "deeper", "--init-from",
                                self.base, "--set", "model.num_decoder_layers=3")
        self.assertEqual(result.returncode, 2)
        self.assertIn("model.num_decoder_layers=3 here, None in", result.stderr.decode())
        self.assertFalse((self.root / "deeper").exists())

    def test_the_kept_layers_run_evenly_from_the_first_to_the_last(self):
        self.assertEqual([kept_layers(3, 2), kept_layers(6, 2), kept_layers(6, 3), kept_layers(6, 1),
                          kept_layers(4, 4)], [[0, 2], [0, 5], [0, 2, 5], [0], [0, 1, 2, 3]])
        with self.assertRaisesRegex(ValueError, "layers can only be dropped"):
            kept_layers(2, 3)

    def test_init_weights_needs_init_from(self):
        result = cli_in_process("train", "--config", "tiny", "--run-dir", self.root / "x", "--init-weights", "best")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--init-weights chooses the weights of --init-from RUN: give --init-from too.",
                      result.stderr.decode())

    def test_it_resumes_from_its_own_checkpoint_afterwards(self):
        self.assertEqual((self.resumed.start_step, self.resumed.final_step), (2, 4))
        self.assertIn(f"{self.lora} continues from its own checkpoint at step 2; --init-from {self.base} is not "
                      "read again.", self.resume_log)
        record = json.loads((self.lora / "init_from.json").read_text())
        self.assertEqual((record["run"], record["steps"]), (str(self.base), [24]))  # written when it started

    def test_describe_shows_where_a_run_started(self):
        result = cli_in_process("describe", "--run-dir", self.lora, "--json")
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        info = json.loads(result.stdout)
        self.assertEqual((info["init_from"]["run"], info["init_from"]["steps"]), (str(self.base), [24]))
        text = cli_in_process("describe", "--run-dir", self.lora).stdout.decode()
        self.assertIn(f"started from: {self.base} (latest weights, step 24", text)

    # training.lora_rank

    def test_only_the_adapters_train(self):
        trainable = self.adapted.trainable_weights
        self.assertTrue(trainable)
        self.assertTrue(all(is_adapter(variable) for variable in trainable))
        # 2 attention (x4 projections) and 1 FFN (x2) per decoder block, 1 and 1 per encoder block, 2 blocks each.
        self.assertEqual(len(trainable), 2 * 2 * (4 + 2) + 2 * 2 * (2 * 4 + 2))
        count = sum(int(np.prod(variable.shape)) for variable in trainable)
        self.assertEqual(describe(self.lora_config)["trainable_params"], count)
        self.assertEqual(describe(self.lora_config)["params"], describe(toy_config(self.files))["params"] + count)

    def test_the_base_stays_frozen_and_the_adapters_change(self):
        base = by_path(self.base_model.trainable_weights)
        for path, value in by_path(self.adapted.weights).items():
            if path in base:
                self.assertAllEqual(value, base[path], path)
        adapters_b = [value for path, value in by_path(self.adapted.weights).items() if path.endswith("lora_kernel_b")]
        self.assertTrue(all(np.abs(value).max() > 0 for value in adapters_b))  # they start at zero

    def test_resuming_an_adapted_run_is_exact(self):
        resumed, once = by_path(self.adapted.weights), by_path(self.uninterrupted.weights)
        self.assertEqual(set(resumed), set(once))
        for path, value in once.items():
            self.assertAllEqual(resumed[path], value, path)

    def test_the_checkpoints_hold_the_adapters_and_loading_merges_them(self):
        saved = adapters_in(self.lora_config, self.lora / "checkpoints" / "ckpt-4")
        trained = by_path(self.adapted.weights)
        self.assertEqual(len(saved), 2 * 32)
        for path, value in saved.items():
            self.assertAllEqual(value, trained[path], path)
        merged = load_run_model(self.lora, "latest")
        self.assertFalse(any(is_adapter(variable) for variable in merged.weights))
        source, target = random_ids(3, 7, vocab_size=100), random_ids(3, 5, vocab_size=100, seed=1)
        self.assertAllClose(merged((source, target)), self.adapted((source, target)), atol=1e-5)
        self.assertNotAllClose(merged((source, target)), self.base_model((source, target)), atol=1e-5)

    def test_the_export_merges_the_adapters_and_translates_as_the_adapted_model(self):
        out = export_run(self.lora, self.root / "export", source="latest", request=GREEDY, max_beam_size=1)
        exported_model, tokenizer = load_export(out)
        self.assertFalse(any(is_adapter(variable) for variable in exported_model.weights))
        self.assertEqual(best_texts(open_artifact(out), SENTENCES, beam_size=1), self.adapted_translations(tokenizer))

    def test_the_ctranslate2_export_merges_the_adapters_too(self):
        out = export_ctranslate2_run(self.lora, self.root / "ct2", source="latest", request=GREEDY)
        translations = self.adapted_translations(open_run(self.lora).load_tokenizer())
        self.assertEqual(best_texts(open_artifact(out), SENTENCES, beam_size=1), translations)

    def test_describe_counts_the_adapters_of_every_architecture(self):
        for preset in ("tiny", "lm-mini", "mlm-mini"):
            with self.subTest(preset=preset):
                config = load_config(preset, ["model.vocab_size=100", "training.lora_rank=3"])
                model = add_adapters(build_model(config.model), 3)
                count = sum(int(np.prod(variable.shape)) for variable in model.trainable_weights)
                self.assertEqual(adapter_parameters(config.model, 3), count)
                self.assertEqual(describe(config)["trainable_params"], count)

    def test_averaging_averages_the_adapters(self):
        average_run(self.lora, last=2)
        averaged, first, last = (adapters_in(self.lora_config, path) for path in (
            self.lora / "averaged" / "ckpt", self.lora / "checkpoints" / "ckpt-2", self.lora / "checkpoints" / "ckpt-4"))
        self.assertEqual(len(averaged), 2 * 32)
        for path, value in averaged.items():
            self.assertAllClose(value, (first[path] + last[path]) / 2, atol=1e-7)
        self.assertFalse(any(is_adapter(variable) for variable in load_run_model(self.lora, "averaged").weights))

    def test_the_rank_cannot_change_when_a_run_continues(self):
        with self.assertRaisesRegex(ConfigError, "trained with training.lora_rank=null.*--init-from .* --set "
                                                 "training.lora_rank=2"):
            train(resolve_run(self.base, toy_config(self.files, lora_rank=2)), verbose=0)

    def test_a_rank_of_zero_or_below_is_a_clear_config_error(self):
        for rank in (0, -1):
            with self.subTest(rank=rank), self.assertRaisesRegex(
                    ConfigError, r"training.lora_rank must be a positive integer \(the adapters' rank\), or null to "
                                 f"train every weight without adapters. Received: lora_rank={rank}"):
                toy_config(self.files, lora_rank=rank)

    def test_a_rank_above_the_smallest_projection_is_a_clear_config_error(self):
        self.assertEqual(toy_config(self.files, lora_rank=64).training.lora_rank, 64)  # d_model 64: full rank
        with self.assertRaisesRegex(ConfigError, r"training.lora_rank=65 is larger than the smallest adapted "
                                                 r"projection, whose smaller dimension is model.hidden_dim=64: set "
                                                 r"training.lora_rank to at most 64, or null"):
            toy_config(self.files, lora_rank=65)
        with self.assertRaisesRegex(ConfigError, "lora_rank=9 is larger .* model.intermediate_dim=8: .* at most 8"):
            load_config("tiny", ["model.intermediate_dim=8", "training.lora_rank=9"])
        model = build_model(load_config("tiny", ["model.intermediate_dim=8", "model.vocab_size=100"]).model)
        with self.assertRaisesRegex(ValueError, "rank must be at most 8, the smaller dimension of the smallest "
                                                "projection. Received: rank=9"):
            add_adapters(model, 9)
        run = self.root / "too-large"
        result = cli_in_process("train", "--config", "tiny", "--run-dir", run, "--set", "training.lora_rank=65")
        self.assertEqual(result.returncode, 2)
        self.assertIn("model.hidden_dim=64", result.stderr.decode())
        self.assertFalse(run.exists())  # refused before anything was written

    def test_describe_json_reports_trainable_and_frozen_parameters(self):
        plain = json.loads(cli_in_process("describe", "--config", "mini", "--json").stdout)
        result = cli_in_process("describe", "--config", "mini", "--set", "training.lora_rank=8", "--json")
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        info = json.loads(result.stdout)
        config = load_config("mini")
        self.assertEqual(info["trainable_params"], adapter_parameters(config.model, 8))
        self.assertEqual(info["frozen_params"], plain["params"])  # every weight of the model without adapters
        self.assertEqual(info["params"], info["trainable_params"] + info["frozen_params"])
        self.assertEqual((plain["trainable_params"], plain["frozen_params"], plain["lora_rank"]),
                         (plain["params"], 0, None))

    def test_a_run_saved_when_rank_0_meant_off_opens_without_adapters(self):
        old = self.root / "saved-with-rank-0"
        old.mkdir()
        saved = yaml.safe_load((self.base / "config.yaml").read_text())
        self.assertIsNone(saved["training"]["lora_rank"])  # written as null today
        saved["training"]["lora_rank"] = 0
        (old / "config.yaml").write_text(yaml.safe_dump(saved))
        self.assertIsNone(open_run(old).load_config().training.lora_rank)
        with self.assertRaisesRegex(ConfigError, "lora_rank must be a positive integer"):
            load_config(old / "config.yaml")  # a config file of one's own is read as written
