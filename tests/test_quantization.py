"""int8 SavedModel weights: Dense kernels and the target embedding become int8, logits stay close, exports work."""

import pathlib
import tempfile

import numpy as np

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.export.quantization import INT8_AUTO_MIN_PARAMS, choose_quantization, quantized_copy
from t2t_keras.export.saved_model import export_translator
from tests.helpers import TestCase, best_texts, long_check, random_ids, tiny_transformer, toy_pairs


class QuantizationTest(TestCase):
    def test_dense_kernels_are_int8_and_logits_stay_close(self):
        for tie in ("all", "target", "none"):
            with self.subTest(tie_embeddings=tie):
                model = tiny_transformer(vocab_size=100, hidden_dim=32, intermediate_dim=64, tie_embeddings=tie)
                source, target_in = random_ids(3, 9, 100), random_ids(3, 6, 100)
                expected = model((source, target_in)).numpy()
                quantized = quantized_copy(model)
                got = quantized((source, target_in)).numpy()
                self.assertAllClose(model((source, target_in)).numpy(), expected)  # the original is unchanged
                self.assertLess(np.abs(got - expected).max(), 0.05 * np.abs(expected).max())
                int8 = [w.path for w in quantized.weights if w.dtype == "int8"]

                def quantized_weight(suffix):
                    return any(path.endswith(suffix) for path in int8)

                for name in ("self_attention/query", "cross_attention/value", "feed_forward/inner"):
                    self.assertTrue(quantized_weight(f"decoder/block_0/{name}/kernel"), name)
                self.assertTrue(quantized_weight("target_embedding/embeddings"))
                self.assertEqual(quantized_weight("output_projection/kernel"), tie == "none")
                self.assertEqual(quantized.source_embedding is quantized.target_embedding, tie == "all")
                float_weights = {w.path for w in quantized.weights if w.dtype == "float32"}
                self.assertFalse(any(p.endswith("target_embedding/embeddings") for p in float_weights))

    @long_check
    def test_int8_export_translates(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = train_sentencepiece([s for p in toy_pairs(200) for s in p], pathlib.Path(tmp) / "t.model",
                                            100)
            model = tiny_transformer(vocab_size=100, max_length=32)
            for jit_compile in (False, True):  # greedy only: the int8 weights are the same in every search
                out = export_translator(model, tokenizer, pathlib.Path(tmp) / f"int8-{jit_compile}", max_beam_size=1,
                                        request=GenerationRequest(beam_size=1, max_extra_length=4), quantization="int8",
                                        jit_compile=jit_compile)
                translations = best_texts(SavedModelArtifact(out), ["the cat", "a man eats bread", ""])
                self.assertEqual(len(translations), 3)
                self.assertEqual(translations[2], "")


class AutoQuantizationTest(TestCase):
    """`export --quantization auto`: int8 where it measured faster than float32 on a CPU (docs/results.md)."""

    def test_int8_for_a_large_model_on_a_cpu_with_amx(self):
        for flags in ({"amx_int8"}, {"amx_int8", "amx_bf16", "avx512_vnni"}):
            with self.subTest(flags=flags):
                chosen, reason = choose_quantization(60_000_000, flags)
                self.assertEqual(chosen, "int8")
                self.assertIn("60,000,000 parameters", reason)

    def test_float32_where_int8_measured_slower_or_was_not_measured(self):
        # AVX-512 VNNI without AMX (an AMD EPYC): int8 slower everywhere (docs/results.md); AVX-VNNI, Arm: unmeasured
        for flags in ({"avx512_vnni", "avx512_bf16"}, {"avx_vnni", "avx2"}, {"asimddp", "i8mm"}):
            with self.subTest(flags=flags):
                chosen, reason = choose_quantization(60_000_000, flags)
                self.assertIsNone(chosen)
                self.assertIn("measured faster", reason)
                self.assertIn("--quantization int8", reason)

    def test_float32_for_a_small_model(self):
        chosen, reason = choose_quantization(1_901_056, {"avx512_vnni", "amx_int8"})
        self.assertIsNone(chosen)
        self.assertIn("1,901,056 parameters, under", reason)
        self.assertIn("--quantization int8", reason)  # how to force it

    def test_float32_on_a_cpu_without_int8_units(self):
        chosen, reason = choose_quantization(INT8_AUTO_MIN_PARAMS, {"avx2", "fma"})
        self.assertIsNone(chosen)
        self.assertIn("this CPU has no amx_int8", reason)

    def test_the_threshold_is_inclusive(self):
        self.assertEqual(choose_quantization(INT8_AUTO_MIN_PARAMS, {"amx_int8"})[0], "int8")
        self.assertIsNone(choose_quantization(INT8_AUTO_MIN_PARAMS - 1, {"amx_int8"})[0])
