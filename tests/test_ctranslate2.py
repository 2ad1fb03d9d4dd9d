"""CTranslate2 export: the converted model computes what ours does, searches agree, errors are clear."""

import json
import pathlib
import tempfile
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf

from tests.helpers import (
    TestCase,
    best_texts,
    long_check,
    padded_ids,
    predicted,
    tiny_transformer,
    toy_pairs,
    toy_translation,
    train_toy_model,
)

try:
    import ctranslate2
except ImportError:  # pragma: no cover - the package is a declared dependency
    ctranslate2 = None

if ctranslate2 is not None:
    from t2t_keras.artifacts.ctranslate2 import CTranslate2Artifact
    from t2t_keras.decoding import beam_search, greedy_decode
    from t2t_keras.decoding.request import GenerationRequest
    from t2t_keras.errors import T2TError
    from t2t_keras.export.ctranslate2_converter import UnsupportedModelError
    from t2t_keras.export.ctranslate2_export import export_ctranslate2
    from t2t_keras.serving.server import create_app
    from t2t_keras.special_ids import EOS_ID

MAX_LENGTH = 64
EXTRA = 10
# Each variant is trained briefly, so its searches have clear winners (exact comparisons need no near-ties).
VARIANTS = {
    "post-LN, all tied, sinusoidal": {},
    "pre-LN, untied, learned positions": dict(normalize_first=True, tie_embeddings="none",
                                              position_encoding="learned"),
    "post-LN, target tied": dict(tie_embeddings="target"),
    "post-LN, relative positions": dict(position_encoding="relative"),
    "pre-LN, T5's switches": dict(position_encoding="relative", normalize_first=True, normalization="rms",
                                  gated_feed_forward=True, activation="gelu_tanh", use_bias=False,
                                  scale_attention=False, scale_embeddings=False),
    "pre-LN, umT5's table per layer": dict(position_encoding="relative", relative_bias_per_layer=True,
                                           normalize_first=True, normalization="rms", use_bias=False),
}
_SHARED = {}


def setUpModule():
    if ctranslate2 is None:
        return
    toy = toy_translation()  # its model is `train_toy_model` with its defaults: the first variant
    _SHARED.update(tokenizer=toy.tokenizer, pieces=toy.pieces, pairs=toy.pairs,
                   models={next(iter(VARIANTS)): toy.model})


def ids(sentences, bos=False, eos=True, width=MAX_LENGTH - 4):
    """Right-padded int32 ids of `sentences` (EOS appended, BOS prepended when asked)."""
    rows = [([2] if bos else []) + _SHARED["pieces"].encode(s) + ([EOS_ID] if eos else []) for s in sentences]
    return padded_ids(rows, width)


def trained_model(name):
    """A tiny model of the variant `name`, trained ~200 steps on the toy corpus (cached)."""
    if name not in _SHARED["models"]:
        _SHARED["models"][name] = train_toy_model(_SHARED["pieces"], _SHARED["pairs"], max_length=MAX_LENGTH,
                                                  **VARIANTS[name])
    return _SHARED["models"][name]


def detokenize(tokens):
    return [t.decode("utf-8") for t in _SHARED["tokenizer"].detokenize(tokens).numpy()]


@long_check
@unittest.skipIf(ctranslate2 is None, "ctranslate2 is not installed: pip install ctranslate2==4.8.5")
class ConversionTest(TestCase):
    """float32 conversion of each variant: equal log-probabilities, equal greedy and beam-4 tokens."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sentences = [s for s, _ in toy_pairs(12, seed=7)]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def export(self, name, quantization="float32"):
        out = pathlib.Path(self.tmp.name) / f"{name}-{quantization}".replace(" ", "_").replace(",", "")
        if not out.exists():
            export_ctranslate2(trained_model(name), _SHARED["tokenizer"], out, quantization,
                               request=GenerationRequest(beam_size=4, alpha=0.0, max_extra_length=EXTRA))
        return out

    def test_forced_decoding_log_probs_equal_ours(self):
        """The converted weights compute our model's log-probabilities (CTranslate2's score_batch)."""
        pairs = toy_pairs(6, seed=3)
        for name in VARIANTS:
            with self.subTest(name):
                model = trained_model(name)
                translator = CTranslate2Artifact(self.export(name))
                sums, token_nll = translator._score_batch([s for s, _ in pairs], [t for _, t in pairs])
                source, targets = ids([s for s, _ in pairs]), [t for _, t in pairs]
                logits = model((source, ids(targets, bos=True, eos=False)), training=False)
                log_probs = tf.nn.log_softmax(logits).numpy()
                for row, (got, target) in enumerate(zip(token_nll, ids(targets))):
                    length = int(np.sum(target > 0))
                    ours = log_probs[row, np.arange(length), target[:length]]
                    self.assertAllClose(-got, ours, atol=1e-4)
                    self.assertAllClose(sums[row], -ours.sum(), atol=1e-3)

    def test_greedy_and_beam_search_give_our_tokens(self):
        source = ids(self.sentences)
        for name in VARIANTS:
            model = trained_model(name)
            translator = CTranslate2Artifact(self.export(name), exact_limits=True)
            greedy = greedy_decode(model, source, max_extra_length=EXTRA)
            beam = beam_search(model, source, beam_size=4, length_penalty="none", max_extra_length=EXTRA)
            for beam_size, ours in ((1, greedy), (4, beam)):
                with self.subTest(name, beam_size=beam_size):
                    tokens = ours["tokens"] if beam_size == 1 else ours["tokens"][:, 0]
                    scores = ours["scores"] if beam_size == 1 else ours["scores"][:, 0]
                    got = predicted(translator, self.sentences, beam_size=beam_size, alpha=0.0,
                                    max_extra_length=EXTRA)
                    self.assertEqual([t[0] for t in got["translations"]], detokenize(tokens))
                    # CTranslate2 renormalises over tokens other than PAD and BOS: a small difference.
                    self.assertAllClose([s[0] for s in got["scores"]], scores.numpy(), atol=0.05)

    def test_output_limits_match_ours(self):
        """With no extra length, many outputs stop at their limit: the per-sentence limits agree."""
        name = next(iter(VARIANTS))
        model, pieces = trained_model(name), _SHARED["pieces"]
        ours = greedy_decode(model, ids(self.sentences), max_extra_length=0)
        for exact_limits in (False, True):
            translator = CTranslate2Artifact(self.export(name), exact_limits=exact_limits)
            got = predicted(translator, self.sentences, beam_size=1, alpha=0.0, max_extra_length=0)
            self.assertEqual([t[0] for t in got["translations"]], detokenize(ours["tokens"]))
            got = predicted(translator, self.sentences, beam_size=4, alpha=0.6, max_extra_length=0, num_return=4)
            for sentence, nbest in zip(self.sentences, got["translations"]):
                limit = len(pieces.encode(sentence)) + 1
                self.assertTrue(all(len(pieces.encode(t)) <= limit for t in nbest), (sentence, nbest))

    def test_int8_loads_and_translates(self):
        name = next(iter(VARIANTS))
        float_size = (self.export(name) / "model.bin").stat().st_size
        for quantization in ("int8_float32", "int8"):
            with self.subTest(quantization):
                out = self.export(name, quantization)
                self.assertLess((out / "model.bin").stat().st_size, float_size)
                self.assertEqual(json.loads((out / "t2t_keras.json").read_text())["quantization"], quantization)
                translations = best_texts(CTranslate2Artifact(out), self.sentences[:4], beam_size=2)
                self.assertEqual(len(translations), 4)
                self.assertTrue(all(isinstance(t, str) and t for t in translations))

    def test_translator_interface_truncation_empty_and_nbest(self):
        translator = CTranslate2Artifact(self.export(next(iter(VARIANTS))))
        long = " ".join(["the big red house"] * 30)
        got = predicted(translator, ["", long, "the cat"], beam_size=3, num_return=3)
        self.assertEqual(got["truncated"], [False, True, False])
        self.assertEqual(got["translations"][0], ["", "", ""])
        self.assertEqual(got["scores"][0], [0.0, 0.0, 0.0])
        self.assertEqual([len(t) for t in got["translations"]], [3, 3, 3])
        self.assertEqual(got["scores"][2], sorted(got["scores"][2], reverse=True))
        with self.assertRaisesRegex(T2TError, "beam_size must be an integer"):
            translator.request(beam_size=0)

    def test_rest_server_answers_with_the_translator(self):
        from starlette.testclient import TestClient

        translator = CTranslate2Artifact(self.export(next(iter(VARIANTS))))
        expected = predicted(translator, self.sentences[:3], beam_size=2, num_return=2)
        with TestClient(create_app(translator, max_wait_ms=1)) as client:
            answer = client.post("/v1/models/default:predict",
                                 json={"instances": self.sentences[:3], "params": {"beam_size": 2, "num_return": 2}})
            self.assertEqual(answer.status_code, 200)
            self.assertEqual([p["translations"] for p in answer.json()["predictions"]], expected["translations"])
            self.assertEqual(client.post("/v1/models/default:predict", json={"instances": [1]}).status_code, 400)
            metadata = client.get("/v1/models/default/metadata").json()["metadata"]
            self.assertEqual(metadata["decoding"]["defaults"]["beam_size"], 4)

    def test_serve_command_answers_and_stops(self):
        """`t2t-keras serve --ctranslate2 DIR` on port 0: TF Serving's default model name, clean exit on SIGINT."""
        import os
        import re
        import signal
        import subprocess
        import sys

        import httpx

        from tests.test_server import wait_until_ready

        command = [sys.executable, "-m", "t2t_keras", "serve", "--ctranslate2", str(self.export(next(iter(VARIANTS)))),
                   "--port", "0", "--max-wait-ms", "1"]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                                   cwd=pathlib.Path(__file__).resolve().parents[1])
        try:
            port = None
            for line in process.stderr:
                match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
                if match:
                    port = int(match.group(1))
                    break
            self.assertIsNotNone(port, "the server did not start")
            wait_until_ready(f"http://127.0.0.1:{port}")  # it listens while the model loads
            answer = httpx.post(f"http://127.0.0.1:{port}/v1/models/default:predict",
                                json={"instances": self.sentences[:2] + [""]}, timeout=120)
            self.assertEqual(answer.status_code, 200)
            self.assertEqual(answer.json()["predictions"][2]["translations"], "")
            process.send_signal(signal.SIGINT)
            self.assertEqual(process.wait(timeout=120), 0)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            process.stderr.close()


@unittest.skipIf(ctranslate2 is None, "ctranslate2 is not installed: pip install ctranslate2==4.8.5")
class UnsupportedTest(TestCase):
    """What CTranslate2 cannot express fails before anything is written; a failed write leaves nothing."""

    def assert_fails_cleanly(self, error, pattern, model=None, tokenizer="shared"):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "ct2"
            tokenizer = _SHARED["tokenizer"] if tokenizer == "shared" else tokenizer
            with self.assertRaisesRegex(error, pattern):
                export_ctranslate2(model or tiny_transformer(vocab_size=100), tokenizer, out)
            self.assertEqual(list(pathlib.Path(tmp).iterdir()), [])

    def test_unequal_key_and_value_sizes(self):
        self.assert_fails_cleanly(UnsupportedModelError, "key_dim=8 and value_dim=4",
                                  tiny_transformer(vocab_size=100, key_dim=8, value_dim=4))

    def test_a_wordpiece_tokenizer(self):
        from t2t_keras.data.wordpiece import WordpieceTokenizer
        from t2t_keras.errors import T2TError

        wordpiece = WordpieceTokenizer(["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(96)])
        self.assert_fails_cleanly(T2TError, "ships a SentencePiece model .* tokenizer is 'wordpiece'",
                                  tokenizer=wordpiece)

    def test_an_activation_ctranslate2_lacks(self):
        self.assert_fails_cleanly(UnsupportedModelError, "no feed-forward activation 'elu'",
                                  tiny_transformer(vocab_size=100, activation="elu"))

    def test_an_already_quantized_model(self):
        from t2t_keras.export.quantization import quantized_copy

        self.assert_fails_cleanly(UnsupportedModelError, "already has int8 weights",
                                  quantized_copy(tiny_transformer(vocab_size=100)))

    def test_missing_tokenizer(self):
        self.assert_fails_cleanly(T2TError, "needs the model's tokenizer", tokenizer=None)

    def test_vocabulary_mismatch(self):
        self.assert_fails_cleanly(T2TError, "100 pieces but the model expects a vocabulary of 50",
                                  tiny_transformer())

    def test_a_failed_write_leaves_no_directory(self):
        from ctranslate2.specs import TransformerSpec

        def half_write(spec, output_dir):
            (pathlib.Path(output_dir) / "model.bin").write_bytes(b"partial")
            raise OSError("disk full")

        with mock.patch.object(TransformerSpec, "save", half_write):
            self.assert_fails_cleanly(OSError, "disk full")

    def test_existing_directory_needs_overwrite(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "ct2"
            out.mkdir()
            with self.assertRaisesRegex(FileExistsError, "already exists"):
                export_ctranslate2(tiny_transformer(vocab_size=100), _SHARED["tokenizer"], out)
            export_ctranslate2(tiny_transformer(vocab_size=100), _SHARED["tokenizer"], out, overwrite=True)
            self.assertTrue((out / "model.bin").exists() and (out / "tokenizer.model").exists())


if __name__ == "__main__":
    unittest.main()
