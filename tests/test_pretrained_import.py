"""`t2t-keras import`: Hugging Face checkpoints made here with transformers become runs that give the same logits
and the same token ids, and bad checkpoints are refused clearly without leaving a run behind.

Shapes: classic OPUS-MT (shared vocabulary, swish, scaled embeddings), tc-big style (ReLU, unscaled embeddings, a
non-zero end id), separate source and target vocabularies, NLLB (pre-LN, fairseq positions, language codes) and
M2M-100 (its own tokenizer files, GELU, unscaled embeddings, fewer decoder layers).
"""

import json
import os
import pathlib
import shutil
import tempfile
from unittest import mock

import numpy as np

from t2t_keras.errors import T2TError
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.runs import load_run_model, open_run
from tests import hf_checkpoints
from tests.helpers import TestCase, cli_in_process
from tests.test_model_switches import marian_table

TOLERANCE = 1e-4  # float32 logits, ours against transformers'


def _hf_logits(directory, source, target_in, pad):
    import torch
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(source), attention_mask=torch.tensor(source != pad),
                     decoder_input_ids=torch.tensor(target_in)).logits.numpy()


def _inputs(config, seed=0):
    """A source batch (its second row right-padded) and decoder inputs starting with the decoder start id."""
    ids = config.model.special_ids
    rng = np.random.default_rng(seed)
    low = 4  # above every special id of these checkpoints but Marian's last-id pad, which is never drawn
    source = rng.integers(low, (config.model.source_vocab_size or config.model.vocab_size) - 1, size=(2, 7))
    source[:, -1] = ids.eos
    source[1, 4:] = ids.pad
    source[1, 3] = ids.eos
    target_in = rng.integers(low, config.model.vocab_size - 1, size=(2, 5))
    target_in[:, 0] = ids.decoder_start
    return source.astype(np.int32), target_in.astype(np.int32)


class ImportTestBase(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_same_logits(self, checkpoint, run):
        """The run, opened by the ordinary readers, gives transformers' logits."""
        config = open_run(run).load_config()
        source, target_in = _inputs(config)
        ours = np.asarray(load_run_model(run)((source, target_in)))
        theirs = _hf_logits(checkpoint, source, target_in, config.model.special_ids.pad)
        self.assertEqual(ours.shape, theirs.shape)
        self.assertLessEqual(float(np.max(np.abs(ours - theirs))), TOLERANCE)

    def assert_same_tokens(self, checkpoint, run, lines, **languages):
        """Our tokenizer's ids equal transformers' tokenizer's for sources and targets, and so does the text of
        target ids (decode with skip_special_tokens)."""
        from transformers import AutoTokenizer

        theirs = AutoTokenizer.from_pretrained(checkpoint, **languages)
        ours = open_run(run).load_tokenizer()
        self.assertEqual(ours.tokenize(lines).to_list(), [theirs(line)["input_ids"] for line in lines])
        labels = [theirs(text_target=line)["input_ids"] for line in lines]
        self.assertEqual(ours.tokenize_target(lines).to_list(), labels)
        texts = [text.decode("utf-8") for text in ours.detokenize(ours.tokenize_target(lines)).numpy()]
        self.assertEqual(texts, [theirs.decode(ids, skip_special_tokens=True) for ids in labels])


class MarianImportTest(ImportTestBase):
    SHAPES = {"classic": {}, "tc-big": {"activation": "relu", "scale_embedding": False, "eos_first": False},
              "separate": {"separate": True, "eos_first": False}}  # one pad id (0) in both vocabularies

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.checkpoints, cls.runs = {}, {}
        for index, (name, options) in enumerate(cls.SHAPES.items()):
            cls.checkpoints[name] = hf_checkpoints.marian_checkpoint(cls.root / name, seed=index, **options)
            cls.runs[name] = import_checkpoint("marian", cls.checkpoints[name], cls.root / f"run-{name}")

    def test_logits_equal_transformers(self):
        for name in self.SHAPES:
            with self.subTest(shape=name):
                self.assert_same_logits(self.checkpoints[name], self.runs[name])

    def test_token_ids_and_text_equal_transformers(self):
        lines = hf_checkpoints.sentences(200, seed=3, tags=(">>deu<<", ">>fra<<", ">>xyz<<"))
        for name in self.SHAPES:
            with self.subTest(shape=name):
                self.assert_same_tokens(self.checkpoints[name], self.runs[name], lines)

    def test_the_run_records_the_switches_the_ids_and_the_provenance(self):
        config = open_run(self.runs["tc-big"]).load_config()
        self.assertEqual((config.model.activation, config.model.scale_embeddings, config.model.position_sinusoid),
                         ("relu", False, "split"))
        self.assertEqual((config.model.special_ids.pad, config.model.special_ids.eos,
                          config.model.special_ids.decoder_start), (0, 3, 0))
        self.assertTrue(config.model.final_logits_bias)
        self.assertEqual(config.data.tokenizer, "pretrained")
        self.assertEqual(config.decoding.beam_size, 3)  # the checkpoint's num_beams
        separate = open_run(self.runs["separate"]).load_config().model
        self.assertEqual(separate.tie_embeddings, "target")
        self.assertNotEqual(separate.source_vocab_size, separate.vocab_size)
        record = json.loads((self.runs["classic"].pretrained_path).read_text())
        self.assertEqual(record["checkpoint"], "classic")
        self.assertEqual(set(record["files"]), {"config.json", "generation_config.json", "model.safetensors",
                                                "source.spm", "target.spm", "tokenizer_config.json", "vocab.json"})
        digest = __import__("hashlib").sha256((self.checkpoints["classic"] / "vocab.json").read_bytes()).hexdigest()
        self.assertEqual(record["files"]["vocab.json"], digest)
        self.assertEqual(record["generation"]["num_beams"], 3)

    def test_the_cli_imports_a_checkpoint(self):
        run = self.root / "run-cli"
        result = cli_in_process("import", "--from", "marian", self.checkpoints["classic"], "--run-dir", run)
        self.assertEqual(result.returncode, 0, result.stderr.decode()[-2000:])
        self.assertEqual(open_run(run).load_config(), open_run(self.runs["classic"]).load_config())

    def test_a_pytorch_bin_needs_torch_and_gives_the_same_model(self):
        import torch
        from safetensors.numpy import load_file

        directory = self.root / "bin"
        shutil.copytree(self.checkpoints["classic"], directory)
        tensors = load_file(directory / "model.safetensors")
        torch.save({name: torch.from_numpy(value) for name, value in tensors.items()}, directory / "pytorch_model.bin")
        os.remove(directory / "model.safetensors")
        with mock.patch.dict("sys.modules", {"torch": None}):
            with self.assertRaisesRegex(T2TError, "pytorch_model.bin is a PyTorch pickle.*pip install torch"):
                import_checkpoint("marian", directory, self.root / "run-bin-refused")
        self.assertFalse((self.root / "run-bin-refused").exists())
        run = import_checkpoint("marian", directory, self.root / "run-bin")
        self.assert_same_logits(directory, run)


class NllbImportTest(ImportTestBase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.checkpoint = hf_checkpoints.nllb_checkpoint(cls.root / "nllb")
        cls.run_dir = import_checkpoint("m2m100", cls.checkpoint, cls.root / "run-nllb", "eng_Latn", "deu_Latn")

    def test_logits_equal_transformers(self):
        self.assert_same_logits(self.checkpoint, self.run_dir)

    def test_token_ids_and_text_equal_transformers(self):
        lines = hf_checkpoints.sentences(200, seed=4)
        self.assert_same_tokens(self.checkpoint, self.run_dir, lines, src_lang="eng_Latn", tgt_lang="deu_Latn")

    def test_the_run_holds_the_languages_and_forces_the_target_code(self):
        config = open_run(self.run_dir).load_config()
        self.assertEqual((config.data.source_lang, config.data.target_lang), ("eng_Latn", "deu_Latn"))
        self.assertEqual((config.model.normalize_first, config.model.position_sinusoid, config.model.position_offset),
                         (True, "fairseq", 2))
        record = json.loads(open_run(self.run_dir).pretrained_path.read_text())
        tokenizer = open_run(self.run_dir).load_tokenizer()
        self.assertEqual(record["generation"]["forced_bos_token_id"], tokenizer.tokenize_target([""]).to_list()[0][0])
        self.assertEqual(record["ignored_settings"], {"encoder_layerdrop": 0.05, "decoder_layerdrop": 0.05})

    def test_an_unknown_or_missing_language_is_refused(self):
        for languages, flag in ((("eng_Latn", "xyz_Latn"), "--target-lang 'xyz_Latn' is not one of"),
                                ((None, "deu_Latn"), "--source-lang is required")):
            with self.subTest(languages=languages):
                with self.assertRaisesRegex(T2TError, f"{flag}.*deu_Latn, eng_Latn, fra_Latn"):
                    import_checkpoint("m2m100", self.checkpoint, self.root / "run-refused", *languages)
                self.assertFalse((self.root / "run-refused").exists())


class M2M100ImportTest(ImportTestBase):
    """M2M-100's own tokenizer files (vocab.json and the codes after it), GELU, unscaled embeddings, a decoder
    shallower than the encoder."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.checkpoint = hf_checkpoints.m2m100_checkpoint(cls.root / "m2m100")
        cls.run_dir = import_checkpoint("m2m100", cls.checkpoint, cls.root / "run-m2m100", "en", "__de__")

    def test_logits_equal_transformers(self):
        self.assert_same_logits(self.checkpoint, self.run_dir)

    def test_token_ids_and_text_equal_transformers(self):
        from transformers import AutoTokenizer

        lines = hf_checkpoints.sentences(200, seed=6)
        theirs = AutoTokenizer.from_pretrained(self.checkpoint, src_lang="en", tgt_lang="de")
        ours = open_run(self.run_dir).load_tokenizer()
        self.assertEqual(ours.tokenize(lines).to_list(), [theirs(line)["input_ids"] for line in lines])
        labels = [theirs(text_target=line)["input_ids"] for line in lines]
        self.assertEqual(ours.tokenize_target(lines).to_list(), labels)
        self.assertEqual(labels[0][0], theirs.get_lang_id("de"))
        # transformers 5's M2M100Tokenizer keeps the language code in decoded text (its 4.x left it out, as
        # NllbTokenizer does): compare the text after it.
        texts = [text.decode("utf-8") for text in ours.detokenize(ours.tokenize_target(lines)).numpy()]
        self.assertEqual(texts, [theirs.decode(ids[1:], skip_special_tokens=True) for ids in labels])


class RefusalTest(ImportTestBase):
    """Each bad checkpoint: a T2TError naming the file or key and the fix, and no run (or half of one) written."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.good = hf_checkpoints.marian_checkpoint(cls.root / "good")

    def refused(self, name, pattern, change=None, family="marian"):
        directory = self.root / name
        shutil.copytree(self.good, directory)
        if change is not None:
            change(directory)
        with self.assertRaisesRegex(T2TError, pattern):
            import_checkpoint(family, directory, self.root / "runs" / name)
        self.assertEqual(list((self.root / "runs").glob("*")) if (self.root / "runs").exists() else [], [])

    def test_a_directory_that_is_not_a_checkpoint(self):
        self.refused("empty", "is not a Hugging Face checkpoint directory: it has no config.json",
                     lambda d: (shutil.rmtree(d), d.mkdir()))

    def test_another_architecture(self):
        self.refused("bart", "model_type='bart', but --from marian imports model_type 'marian'",
                     lambda d: hf_checkpoints.edit_json(d / "config.json", model_type="bart"))
        self.refused("wrong-family", "model_type='marian', but --from m2m100 .* import it with --from marian",
                     family="m2m100")

    def test_a_switch_the_model_lacks(self):
        for key, value in (("normalize_embedding", True), ("static_position_embeddings", False),
                           ("add_bias_logits", True), ("activation_function", "gelu_new")):
            self.refused(f"switch-{key}", f"config.json sets {key}={value!r}: .*not imported",
                         lambda d, key=key, value=value: hf_checkpoints.edit_json(d / "config.json", **{key: value}))
        self.refused("heads", "decoder_attention_heads=4.*one value for both stacks",
                     lambda d: hf_checkpoints.edit_json(d / "config.json", decoder_attention_heads=4))

    def test_weights_whose_shapes_disagree_with_the_config(self):
        self.refused("shapes", r"fc1.weight has shape \(32, 16\), but config.json implies \(64, 16\)",
                     lambda d: hf_checkpoints.edit_json(d / "config.json", encoder_ffn_dim=64, decoder_ffn_dim=64))
        self.refused("layers", r"lack \['model.decoder.layers.2.*config.json implies",
                     lambda d: hf_checkpoints.edit_json(d / "config.json", decoder_layers=3))

    def test_a_missing_tokenizer_file(self):
        self.refused("no-spm", "has no source.spm, which the import needs: download the checkpoint's tokenizer",
                     lambda d: os.remove(d / "source.spm"))
        self.refused("no-weights", "holds no weights: expected model.safetensors",
                     lambda d: os.remove(d / "model.safetensors"))

    def test_a_stored_position_table_is_checked(self):
        from safetensors.numpy import load_file, save_file

        def store(table):
            def change(directory):
                tensors = load_file(directory / "model.safetensors")
                tensors["model.encoder.embed_positions.weight"] = table.astype(np.float32)
                save_file(tensors, directory / "model.safetensors")
            return change

        marian = marian_table(64, 16)  # what older Marian checkpoints store: transformers' own table
        directory = self.root / "positions"
        shutil.copytree(self.good, directory)
        store(marian)(directory)
        import_checkpoint("marian", directory, self.root / "run-positions")
        interleaved = np.stack([marian[:, :8], marian[:, 8:]], axis=-1).reshape(64, 16)  # §3.5's layout
        self.refused("interleaved", "model.encoder.embed_positions.weight differs from the sinusoid t2t_keras "
                                    "computes", store(interleaved))

    def test_bfloat16_weights_are_read_as_float32(self):
        import torch
        from safetensors.numpy import load_file
        from safetensors.torch import save_file

        directory = self.root / "bfloat16"
        shutil.copytree(self.good, directory)
        tensors = {name: torch.from_numpy(value).to(torch.bfloat16)
                   for name, value in load_file(directory / "model.safetensors").items()}
        save_file(tensors, directory / "model.safetensors")
        model = load_run_model(import_checkpoint("marian", directory, self.root / "run-bfloat16"))
        self.assertAllClose(model.target_embedding.embeddings.numpy(),
                            tensors["model.shared.weight"].float().numpy(), atol=0)

    def test_a_run_directory_that_exists(self):
        (self.root / "taken").mkdir()
        with self.assertRaisesRegex(T2TError, "already exists: import into a new --run-dir"):
            import_checkpoint("marian", self.good, self.root / "taken")
