"""`t2t-keras export --format marian`: a run trained here becomes a Hugging Face OPUS-MT checkpoint that transformers
loads and computes the run's logits and ids with, that `t2t-keras import --from marian` reads back to the same weights;
an imported checkpoint exports back to its own tensors; what MarianMTModel cannot compute is refused, nothing written.

One tiny run (§3.5's interleaved sinusoid, MarianMTModel's LayerNorm epsilon 1e-5) is trained for two updates once.
"""

import json
import pathlib
import shutil
import tempfile
from unittest import mock

import numpy as np
import yaml
from safetensors.numpy import load_file, save_file

from t2t_keras.config import replace
from t2t_keras.errors import DiskFullError
from t2t_keras.pretrained import marian, marian_export
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.pretrained.weights import tensors_of
from t2t_keras.resolved_run import InitSource, adopt, resolve_run
from t2t_keras.runs import load_run_model, open_run
from t2t_keras.training.trainer import train
from tests import hf_checkpoints
from tests.helpers import TestCase, cli_in_process, toy_config, toy_pairs, write_toy_corpus
from tests.test_pretrained_import import TOLERANCE, _hf_logits, _inputs

# Sentences of the toy corpus, one with a character the vocabulary lacks, extra spaces, an empty one.
LINES = [source for source, _ in toy_pairs(6, seed=7)] + ["the cat € sees", "  a  big   dog ", ""]


def edited_run(original, directory, model=None, data=None):
    """A copy of the run `original` whose config.yaml has the given model and data keys changed."""
    shutil.copytree(original, directory)
    path = directory / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    saved["model"].update(model or {})
    saved["data"].update(data or {})
    path.write_text(yaml.safe_dump(saved))
    return directory


class MarianExportTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = root = pathlib.Path(cls.tmp.name)
        files = write_toy_corpus(root / "data", train=120, dev=8, test=8)
        config = toy_config(files, train_steps=2, steps_per_epoch=2, checkpoint_every_steps=2, learning_rate=0.01)
        cls.config = replace(config, model={"layer_norm_epsilon": 1e-5, "activation": "swish"},
                             data={"dev_files": None})
        cls.run_dir = root / "run"
        train(resolve_run(cls.run_dir, cls.config), verbose=0)
        cls.export = root / "marian"
        result = cli_in_process("export", "--run-dir", cls.run_dir, "--out", cls.export, "--format", "marian",
                                "--beam-size", "3")
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        cls.back = import_checkpoint("marian", cls.export, root / "back")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_transformers_computes_the_run_s_logits(self):
        config = open_run(self.run_dir).load_config()
        source, target_in = _inputs(config)
        ours = np.asarray(load_run_model(self.run_dir)((source, target_in)))
        theirs = _hf_logits(self.export, source, target_in, config.model.special_ids.pad)
        self.assertEqual(ours.shape, theirs.shape)
        self.assertLessEqual(float(np.max(np.abs(ours - theirs))), TOLERANCE)

    def test_marian_tokenizer_gives_the_run_s_ids_and_text(self):
        from transformers import MarianTokenizer

        theirs = MarianTokenizer.from_pretrained(self.export)
        tokenizer = open_run(self.run_dir).load_tokenizer()
        eos = self.config.model.special_ids.eos
        ours = [ids + [eos] for ids in tokenizer.tokenize(LINES).to_list()]  # the pipeline's source rows
        self.assertEqual([theirs(line)["input_ids"] for line in LINES], ours)
        self.assertEqual([theirs(text_target=line)["input_ids"] for line in LINES], ours)
        known = [index for index, line in enumerate(LINES) if "€" not in line]  # MarianTokenizer drops <unk>
        texts = [text.decode() for text in tokenizer.detokenize(tokenizer.tokenize([LINES[i] for i in known])).numpy()]
        self.assertEqual([theirs.decode(ours[i], skip_special_tokens=True) for i in known], texts)

    def test_the_checkpoint_s_files_and_settings(self):
        self.assertEqual(sorted(path.name for path in self.export.iterdir()),
                         ["config.json", "generation_config.json", "model.safetensors", "source.spm",
                          "special_tokens_map.json", "target.spm", "tokenizer_config.json", "vocab.json"])
        config = json.loads((self.export / "config.json").read_text())
        self.assertEqual({key: config[key] for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id",
                                                       "share_encoder_decoder_embeddings", "tie_word_embeddings",
                                                       "scale_embedding", "activation_function", "d_model")},
                         {"pad_token_id": 0, "eos_token_id": 3, "decoder_start_token_id": 2,
                          "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
                          "scale_embedding": True, "activation_function": "swish", "d_model": 64})
        generation = json.loads((self.export / "generation_config.json").read_text())
        self.assertEqual((generation["num_beams"], generation["bad_words_ids"]), (3, [[0], [2]]))
        self.assertEqual((self.export / "source.spm").read_bytes(), (self.run_dir / "tokenizer.model").read_bytes())
        self.assertEqual(set(load_file(self.export / "model.safetensors")["final_logits_bias"].ravel()), {0.0})

    def test_importing_the_export_gives_back_the_weights_in_marian_s_layout(self):
        ours, back = load_run_model(self.run_dir), load_run_model(self.back)
        permutation = marian_export.residual_permutation(self.config.model)
        self.assertEqual(list(permutation[:3]) + list(permutation[-3:]), [0, 2, 4, 59, 61, 63])  # sines, cosines
        names = marian.embedding_names(shared=True)
        expected, found = tensors_of(ours, names, permutation), tensors_of(back, names)
        self.assertEqual(set(found) - set(expected), {"final_logits_bias"})
        for name, value in expected.items():
            self.assertTrue(np.array_equal(found[name], value), name)  # bit-equal, in the stored layout
        inverse = np.argsort(permutation)  # and undone, our own weights again
        self.assertTrue(np.array_equal(tensors_of(back, names, inverse)["model.shared.weight"],
                                       ours.target_embedding.embeddings.numpy()))
        model = open_run(self.back).load_config().model
        self.assertEqual((model.position_sinusoid, model.final_logits_bias, model.special_ids, model.activation),
                         ("split", True, self.config.model.special_ids, "swish"))
        source, target_in = _inputs(open_run(self.run_dir).load_config())
        difference = np.abs(np.asarray(ours((source, target_in))) - np.asarray(back((source, target_in))))
        self.assertLessEqual(float(difference.max()), TOLERANCE)

    def test_an_imported_checkpoint_exports_back_to_its_own_tensors(self):
        from transformers import MarianTokenizer

        for name, checkpoint in self.imported_checkpoints().items():
            with self.subTest(shape=name):
                run = import_checkpoint("marian", checkpoint, self.root / f"run-{name}")
                out = self.root / f"again-{name}"
                marian_export.export_marian_run(run, out, mock.Mock(beam_size=3))
                original, again = load_file(checkpoint / "model.safetensors"), load_file(out / "model.safetensors")
                self.assertEqual(sorted(again), sorted(original))
                for key, value in original.items():
                    self.assertTrue(np.array_equal(again[key], value), key)
                for file in ("source.spm", "target.spm", "vocab.json", "target_vocab.json"):
                    self.assertEqual((out / file).exists() and (out / file).read_bytes(),
                                     (checkpoint / file).exists() and (checkpoint / file).read_bytes(), file)
                lines = hf_checkpoints.sentences(20, seed=2, tags=(">>deu<<",))
                self.assertEqual(MarianTokenizer.from_pretrained(out)(lines)["input_ids"],
                                 MarianTokenizer.from_pretrained(checkpoint)(lines)["input_ids"])

    def imported_checkpoints(self):
        """OPUS-MT checkpoints: one vocabulary tied three ways, separate vocabularies (tied to the output), and
        untied output weights (tie_word_embeddings false: lm_head.weight of its own)."""
        checkpoints = {"classic": hf_checkpoints.marian_checkpoint(self.root / "classic"),
                       "separate": hf_checkpoints.marian_checkpoint(self.root / "separate", separate=True,
                                                                    eos_first=False, seed=1)}
        untied = self.root / "untied"
        shutil.copytree(checkpoints["classic"], untied)
        hf_checkpoints.edit_json(untied / "config.json", tie_word_embeddings=False)
        tensors = load_file(untied / "model.safetensors")
        tensors["lm_head.weight"] = np.random.default_rng(3).normal(size=tensors["model.shared.weight"].shape)
        save_file({key: value.astype(np.float32) for key, value in tensors.items()}, untied / "model.safetensors",
                  metadata={"format": "pt"})
        return {**checkpoints, "untied": untied}

    def refused(self, run, pattern, *flags):
        out = self.root / "refused"
        result = cli_in_process("export", "--run-dir", run, "--out", out, "--format", "marian", *flags)
        self.assertNotEqual(result.returncode, 0)
        self.assertRegex(result.stderr.decode(), pattern)
        self.assertFalse(out.exists())
        self.assertEqual([path.name for path in self.root.glob(".refused*")], [])

    def test_what_marian_cannot_compute_is_refused_naming_the_setting(self):
        for name, model, pattern in (
                ("epsilon", {"layer_norm_epsilon": 1e-6}, r"model.layer_norm_epsilon=1e-06, and MarianMTModel's "
                                                          r"LayerNorms use epsilon 1e-05.*--init-from RUN"),
                ("pre-ln", {"normalize_first": True}, r"model.normalize_first=true, and MarianMTModel normalises "
                                                      r"after each sublayer"),
                ("fairseq", {"position_sinusoid": "fairseq"}, r"model.position_sinusoid=fairseq.*Fix: export it "
                                                              r"with --format saved_model"),
                ("heads", {"key_dim": 8}, r"MarianMTModel's heads are d_model / h = 16 wide")):
            with self.subTest(setting=name):
                self.refused(edited_run(self.run_dir, self.root / f"edited-{name}", model=model), pattern)

    def test_a_wordpiece_tokenizer_and_options_marian_lacks_are_refused(self):
        self.refused(edited_run(self.run_dir, self.root / "edited-wordpiece", data={"tokenizer": "wordpiece"}),
                     r"this run has a wordpiece tokenizer, which MarianTokenizer cannot reproduce")
        self.refused(self.run_dir, r"--alpha does not apply to --format marian of a translation run, which takes "
                               r"--beam-size", "--alpha", "0.6")

    def test_the_epsilon_the_refusal_names_can_be_set_when_a_run_starts_from_another(self):
        default = edited_run(self.run_dir, self.root / "edited-default", model={"layer_norm_epsilon": 1e-6})
        source = InitSource(default, overrides=("model.layer_norm_epsilon=1e-5",))
        config = adopt(self.config, source, open_run(self.root / "adapted"))
        expected = replace(open_run(default).load_config(), model={"layer_norm_epsilon": 1e-5})
        self.assertEqual(config.model, expected.model)

    def test_a_failed_write_leaves_no_directory(self):
        out = self.root / "failed"
        with mock.patch.object(marian_export, "_save_safetensors", side_effect=OSError("No space left on device")):
            with self.assertRaisesRegex(DiskFullError, "No space left"):
                marian_export.export_marian_run(self.run_dir, out, mock.Mock(beam_size=1))
        self.assertFalse(out.exists())
        self.assertEqual([path.name for path in self.root.glob(".failed*")], [])
        with self.assertRaisesRegex(FileExistsError, "already exists"):
            marian_export.export_marian_run(self.run_dir, self.export, mock.Mock(beam_size=1))


if __name__ == "__main__":
    import unittest

    unittest.main()
