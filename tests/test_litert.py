"""LiteRT export: one .tflite file run by the LiteRT interpreter (ai-edge-litert) translates like the SavedModel,
greedy and beam 4; its tokenizer equals SentencePiece's; int8 loads and translates; the commands; bad input."""

import json
import pathlib
import sys
import tempfile
from unittest import mock

import numpy as np
import sentencepiece as spm
import tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils

from t2t_keras.artifacts.litert import LiteRTArtifact
from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.config import load_config, replace
from t2t_keras.data.tokenizer import Tokenizer, train_sentencepiece
from t2t_keras.data.wordpiece import WordpieceTokenizer
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.errors import T2TError
from t2t_keras.export import litert_export
from t2t_keras.export.litert_export import CUSTOM_OPS, export_litert, export_litert_run
from t2t_keras.export.litert_tokenizer import LiteRTTokenizer
from t2t_keras.export.saved_model import export_run
from t2t_keras.resolved_run import resolve_run
from t2t_keras.runs import RunDirectory
from t2t_keras.training.trainer import train
from tests.helpers import TestCase, cli_in_process, long_check, predicted, tiny_transformer, toy_pairs, write_toy_corpus

MAX_BEAM_SIZE = 4
MAX_LENGTH = 32  # small, so that the over-long sentence is cut (and flagged) quickly
OVERLONG = " ".join(["the big red dog sees a small green tree"] * 5)
SENTENCES = [pair[0] for pair in toy_pairs(5, seed=7)] + ["", "ZZZ the dog ✓✓ über", OVERLONG]
# Text the tokenizers must reproduce: spaces, unseen and composed characters (NFKC), a long word.
TOKENIZER_TEXT = ["the big red dog", "  two  spaces ", "", "Ünïcödé ß ﬁ ①", "ZZZ qqq ✓✓ x!?",
                  "tree" * 12, "die Katze schlaeft unter dem Baum"]


@long_check
class LiteRTExportTest(TestCase):
    """A toy run trained briefly, exported once as a SavedModel and once (float32, beam 4) as a LiteRT file."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.root = pathlib.Path(cls.tmp.name)
        cls.run_dir = root / "run"
        train(resolve_run(cls.run_dir, toy_config_for(root)), verbose=0)
        cls.path = root / "model.tflite"
        cls.export_cli = cli_in_process("export", "--run-dir", cls.run_dir, "--format", "litert", "--out", cls.path,
                                        "--beam-size", MAX_BEAM_SIZE, "--max-beam-size", MAX_BEAM_SIZE)
        cls.litert = LiteRTArtifact(cls.path, threads=2) if cls.path.exists() else None
        cls._saved_model_results = None

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.export_cli.returncode, 0, self.export_cli.stderr.decode())

    def saved_model(self, beam_size):
        """The `predict` of SENTENCES with `beam_size` (1 or MAX_BEAM_SIZE) by the SavedModel of the same run,
        exported once for the class."""
        cls = type(self)
        if cls._saved_model_results is None:
            translator = SavedModelArtifact(export_run(cls.run_dir, cls.root / "saved", max_beam_size=MAX_BEAM_SIZE,
                                                       request=GenerationRequest(beam_size=MAX_BEAM_SIZE)))
            cls._saved_model_results = {beam: predicted(translator, SENTENCES, beam_size=beam)
                                        for beam in (1, MAX_BEAM_SIZE)}
        return cls._saved_model_results[beam_size]

    def assert_same_as_saved_model(self, beam_size):
        expected = self.saved_model(beam_size)
        got = predicted(self.litert, SENTENCES, beam_size=beam_size)
        self.assertEqual(got["translations"], expected["translations"])
        self.assertEqual(got["truncated"], expected["truncated"])
        self.assertEqual(got["truncated"][-1], True)  # the over-long sentence is cut, as in the SavedModel
        self.assertAllClose(got["scores"], expected["scores"], atol=1e-3)

    def test_greedy_translations_are_the_saved_models(self):
        self.assert_same_as_saved_model(1)

    def test_beam_4_translations_are_the_saved_models(self):
        self.assert_same_as_saved_model(4)

    def test_the_file_holds_builtin_ops_and_the_two_tf_text_ops_only(self):
        model = flatbuffer_utils.read_model(str(self.path))
        custom = {code.customCode.decode() for code in model.operatorCodes if code.customCode}
        self.assertEqual(custom, set(CUSTOM_OPS))  # no Flex op (a Flex op is a custom op named Flex...)
        self.assertEqual([s.signatureKey for s in model.signatureDefs], [b"translate"])

    def test_the_metadata_records_the_defaults_tokenizer_and_weights(self):
        metadata = self.litert.metadata
        self.assertEqual(metadata["defaults"], {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50})
        self.assertEqual((metadata["max_beam_size"], metadata["max_length"]), (MAX_BEAM_SIZE, MAX_LENGTH))
        self.assertEqual((metadata["tokenizer"], metadata["quantization"]), ("bpe", "float32"))
        self.assertEqual(metadata["weights"]["run"], str(self.run_dir))

    def test_out_of_range_values_ask_for_the_defaults(self):
        runner = self.litert.interpreter.get_signature_runner("translate")

        def call(beam_size, alpha, max_extra_length):
            out = runner(sentence=np.array([SENTENCES[0].encode()], dtype=object), beam_size=np.int32(beam_size),
                         alpha=np.float32(alpha), max_extra_length=np.int32(max_extra_length))
            return out["translation"][0], float(out["score"][0])

        self.assertEqual(call(0, -1.0, -1), call(4, 0.6, 50))
        self.assertEqual(call(9, 0.6, 50), call(4, 0.6, 50))  # a beam over max_beam_size is clamped to it
        with self.assertRaisesRegex(T2TError, r"beam_size must be an integer in \[1, 4\]"):
            self.litert.request(beam_size=5)

    def test_translate_and_evaluate_commands_use_the_file(self):
        source, reference = self.root / "test.src", self.root / "test.ref"
        source.write_text("\n".join(SENTENCES[:5]) + "\n", encoding="utf-8")
        expected = [row[0] for row in self.saved_model(MAX_BEAM_SIZE)["translations"][:5]]  # the default beam
        reference.write_text("\n".join(expected) + "\n", encoding="utf-8")
        done = cli_in_process("translate", "--litert", self.path, "--input", source)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertEqual(done.stdout.decode().splitlines(), expected)
        done = cli_in_process("evaluate", "--run-dir", self.run_dir, "--litert", self.path, "--source", source,
                              "--reference", reference, "--json")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertEqual(json.loads(done.stdout)["chrf"], 100.0)  # its own translations as references
        done = cli_in_process("translate", "--litert", self.path, "--input", source, "--alignments")
        self.assertEqual(done.returncode, 2)
        self.assertRegex(done.stderr.decode(), r"alignments \(--alignments, --markup\) does not apply to .*, a "
                                               r"translation LiteRT file, which takes alpha, beam_size, max_extra_length")

    def test_an_int8_file_loads_and_translates(self):
        path = export_litert_run(self.run_dir, self.root / "int8.tflite", quantization="int8", max_beam_size=2,
                                 request=GenerationRequest(beam_size=2))
        translator = LiteRTArtifact(path, threads=2)
        self.assertEqual(translator.metadata["quantization"], "int8")
        model = flatbuffer_utils.read_model(str(path))
        int8 = [tensor for graph in model.subgraphs for tensor in graph.tensors if tensor.type == 9]  # TensorType.INT8
        self.assertGreater(len(int8), 10)  # the weights of the matrix products, in every search
        for beam_size in (1, 2):
            out = predicted(translator, SENTENCES, beam_size=beam_size)
            self.assertEqual((out["translations"][-3], out["scores"][-3]), ([""], [0.0]))  # the empty sentence
            self.assertTrue(any(row[0] for row in out["translations"]))
            self.assertTrue(all(np.isfinite(row[0]) and row[0] <= 0 for row in out["scores"]))
            self.assertEqual(out["truncated"][-1], True)

    def test_without_the_litert_package_the_error_says_what_to_install(self):
        with mock.patch.dict(sys.modules, {"ai_edge_litert": None, "ai_edge_litert.interpreter": None}):
            with self.assertRaisesRegex(T2TError, r"pip install ai-edge-litert==2\.3\.0"):
                LiteRTArtifact(self.path)

    def test_a_failed_export_leaves_no_file_and_an_existing_one_is_kept(self):
        before = self.path.read_bytes()
        with self.assertRaisesRegex(FileExistsError, "overwrite"):
            export_litert_run(self.run_dir, self.path)
        with mock.patch.object(litert_export, "convert", side_effect=OSError("No space left on device")):
            with self.assertRaisesRegex(OSError, "No space left"):
                export_litert_run(self.run_dir, self.path, overwrite=True, max_beam_size=1,
                                  request=GenerationRequest(beam_size=1))
            with self.assertRaises(OSError):
                export_litert_run(self.run_dir, self.root / "failed" / "model.tflite", max_beam_size=1,
                                  request=GenerationRequest(beam_size=1))
        self.assertEqual(self.path.read_bytes(), before)
        self.assertFalse((self.root / "failed" / "model.tflite").exists())


def toy_config_for(root):
    from tests.helpers import toy_config

    config = toy_config(write_toy_corpus(root / "data"), train_steps=120, warmup_steps=40, learning_rate_scale=0.3,
                        steps_per_epoch=60, checkpoint_every_steps=120)
    return replace(config, model={"max_length": MAX_LENGTH}, data={"dev_files": None})  # no validations


class RefusalTest(TestCase):
    """What a LiteRT file cannot hold is refused before anything is written, naming the alternative."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        text = [s for pair in toy_pairs(200) for s in pair]
        cls.tokenizer = train_sentencepiece(text, cls.root / "vocab.model", vocab_size=100)
        cls.model = tiny_transformer(vocab_size=100, max_length=32)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_refused(self, pattern, call, *args, **kwargs):
        out = self.root / "refused" / "model.tflite"
        with self.assertRaisesRegex(T2TError, pattern):
            call(*args, out, **kwargs)
        self.assertFalse(out.parent.exists() and any(out.parent.iterdir()))

    def test_lm_and_mlm_runs_are_refused_with_the_alternative(self):
        for preset, alternative in (("lm-mini", "as a SavedModel"), ("mlm-mini", "generates nothing")):
            run = RunDirectory(self.root / preset)
            run.save_config(load_config(preset))
            self.assert_refused(f"task '{preset[:-5]}'.*LiteRT.*{alternative}", export_litert_run, run)
            done = cli_in_process("export", "--run-dir", run.path, "--format", "litert", "--out",
                                  self.root / "cli.tflite")
            self.assertEqual(done.returncode, 2)
            self.assertFalse((self.root / "cli.tflite").exists())

    def test_a_wordpiece_tokenizer_is_refused(self):
        from t2t_keras.data.wordpiece import SPECIAL_PIECES

        vocab = [SPECIAL_PIECES[i] for i in sorted(SPECIAL_PIECES)] + [f"w{i}" for i in range(96)]
        self.assert_refused("wordpiece.*SavedModel", export_litert, self.model, WordpieceTokenizer(vocab))

    def test_a_model_over_the_flatbuffer_limit_is_refused(self):
        weight_bytes = 4 * self.model.count_params()
        with mock.patch.object(litert_export, "MAX_FLATBUFFER_BYTES", weight_bytes // 8):
            self.assert_refused("at most 2 GB.*--quantization int8.*SavedModel or a CTranslate2", export_litert,
                                self.model, self.tokenizer)
            self.assert_refused("at most 2 GB.*SavedModel or a CTranslate2", export_litert, self.model, self.tokenizer,
                                quantization="int8")

    def test_an_unknown_quantization_is_refused(self):
        self.assert_refused("float32 or int8", export_litert, self.model, self.tokenizer, quantization="int8_float32")

    def test_a_file_that_is_not_an_export_is_refused(self):
        path = self.root / "other.tflite"
        path.write_bytes(b"not a flatbuffer")
        with self.assertRaisesRegex(T2TError, "not a LiteRT export of t2t_keras"):
            LiteRTArtifact(path)


class TokenizerTest(TestCase):
    """The LiteRT tokenizer (TF-Text's fast ops, and BPE merges in builtin ops) equals SentencePiece's."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        text = [s for pair in toy_pairs(400) for s in pair] + ["the tree of trees", "Katzen und Hunde"]
        cls.tokenizers = {kind: train_sentencepiece(text, root / f"{kind}.model", vocab_size=80, model_type=kind)
                          for kind in ("bpe", "unigram")}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_tokenize_and_detokenize_equal_sentencepieces(self):
        for kind, tokenizer in self.tokenizers.items():
            with self.subTest(kind=kind):
                pieces = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes)
                litert = LiteRTTokenizer(tokenizer)
                ids = litert.tokenize(tf.constant(TOKENIZER_TEXT)).numpy()
                self.assertEqual([[i for i in row if i] for row in ids.tolist()], pieces.encode(TOKENIZER_TEXT))
                with_eos = np.concatenate([ids, np.full((len(ids), 1), 3), ids], axis=1)  # ignored from EOS on
                self.assertEqual(litert.detokenize(tf.constant(with_eos)).numpy().tolist(),
                                 Tokenizer(tokenizer.model_bytes).detokenize(tf.constant(ids)).numpy().tolist())

    def test_bpe_merges_are_not_the_fast_ops_own_segmentation(self):
        """Why the merges exist: TF-Text's fast op alone segments a BPE model differently."""
        import tensorflow_text as tf_text

        tokenizer = self.tokenizers["bpe"]
        fast = tf_text.FastSentencepieceTokenizer(tokenizer.model_bytes).tokenize(tf.constant(TOKENIZER_TEXT))
        pieces = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes).encode(TOKENIZER_TEXT)
        self.assertNotEqual(fast.to_list(), pieces)
