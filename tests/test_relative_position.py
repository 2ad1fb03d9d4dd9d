"""T5's switches of the model: the relative position bias (its buckets against transformers' own function, one
table per stack or umT5's one per layer, cached decoding against the whole sequence), RMS normalisation, the gated
feed-forward, attention without 1/sqrt(d_k), the scaled tied output; each serializes, and their defaults are the
paper's model."""

import math
import re

import numpy as np

from t2t_keras import layers
from t2t_keras.build import build_model
from t2t_keras.config import ConfigError, load_config
from t2t_keras.layers.relative_position_bias import relative_position_bucket
from t2t_keras.model import Transformer
from tests.helpers import TestCase, random_ids, tiny_transformer

T5_SWITCHES = dict(position_encoding="relative", relative_buckets=8, relative_max_distance=20, normalization="rms",
                   normalize_first=True, gated_feed_forward=True, activation="gelu_tanh", use_bias=False,
                   scale_attention=False, scale_embeddings=False)


def t5_model(**overrides):
    return tiny_transformer(**{**T5_SWITCHES, **overrides})


class BucketTest(TestCase):
    def test_buckets_are_transformers_on_a_range_of_distances(self):
        import torch
        from transformers.models.t5.modeling_t5 import T5Attention

        distances = np.arange(-400, 401)
        for bidirectional in (True, False):
            for buckets, longest in ((32, 128), (8, 20), (16, 64), (64, 256)):
                theirs = T5Attention._relative_position_bucket(torch.tensor(distances), bidirectional, buckets,
                                                               longest).numpy()
                ours = np.asarray(relative_position_bucket(distances, bidirectional, buckets, longest))
                with self.subTest(bidirectional=bidirectional, buckets=buckets):
                    np.testing.assert_array_equal(ours, theirs)

    def test_the_bias_is_the_tables_rows_of_the_buckets(self):
        layer = layers.RelativePositionBias(num_heads=3, num_buckets=8, max_distance=20, bidirectional=False)
        layer.build()
        bias = np.asarray(layer.bias(2, 6, query_start=4))  # queries at positions 4 and 5
        table = layer.embeddings.numpy()
        self.assertEqual(bias.shape, (1, 3, 2, 6))
        for query in range(2):
            for key in range(6):
                bucket = int(relative_position_bucket(np.array(key - 4 - query), False, 8, 20))
                self.assertAllClose(bias[0, :, query, key], table[bucket])


class LayerTest(TestCase):
    def test_rms_normalization_is_t5s(self):
        x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32") * 3
        layer = layers.RMSNormalization(epsilon=1e-6)
        layer.build(x.shape)
        layer.scale.assign(np.linspace(0.5, 2, 8))
        expected = np.linspace(0.5, 2, 8) * x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + 1e-6)
        self.assertAllClose(layer(x), expected, atol=1e-5)

    def test_the_gated_feed_forward_multiplies_tanh_gelu_by_the_gate(self):
        x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype("float32")
        layer = layers.FeedForward(6, "gelu_tanh", gated=True, use_bias=False)
        layer.build(x.shape)
        inner, gate, outer = (w.numpy() for w in (layer.inner.kernel, layer.gate.kernel, layer.outer.kernel))
        h = x @ inner
        gelu = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        self.assertAllClose(layer(x), (gelu * (x @ gate)) @ outer, atol=1e-5)
        self.assertEqual([w.path.split("/")[-1] for w in layer.weights], ["kernel"] * 3)  # no biases

    def test_attention_without_scale_is_the_plain_dot_product(self):
        rng = np.random.default_rng(2)
        q, k, v = (rng.normal(size=(1, 3, 2, 4)).astype("float32") for _ in range(3))
        bias = rng.normal(size=(1, 2, 3, 3)).astype("float32")
        _, weights = layers.ScaledDotProductAttention(scale=False)(q, k, v, attention_bias=bias)
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) + bias
        expected = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
        self.assertAllClose(weights, expected, atol=1e-5)


class ModelTest(TestCase):
    def test_each_stack_holds_one_table_and_adds_no_positions(self):
        model = t5_model()
        tables = [w.path.split("/", 1)[1] for w in model.weights if "relative_bias" in w.path]
        self.assertEqual(tables, ["encoder/relative_bias/embeddings", "decoder/relative_bias/embeddings"])
        self.assertIsNone(model.source_position)
        self.assertFalse(any("/bias" in w.path for w in model.weights))

    def test_each_layer_holds_its_own_table_with_relative_bias_per_layer(self):
        model = t5_model(relative_bias_per_layer=True, num_decoder_layers=3)
        tables = [w.path.split("/", 1)[1] for w in model.weights if "relative_bias" in w.path]
        self.assertEqual(tables, [f"encoder/relative_bias_{i}/embeddings" for i in range(2)]
                         + [f"decoder/relative_bias_{i}/embeddings" for i in range(3)])
        self.assertIsNone(model.encoder.relative_bias)
        self.assertEqual([table.bidirectional for table in model.decoder.relative_biases], [False] * 3)

    def test_each_layer_adds_its_own_table(self):
        """Every layer's table set to the shared model's gives its outputs; a change to the second layer's table
        leaves the first layer's attention as it was and changes the output."""
        shared, per_layer = t5_model(), t5_model(relative_bias_per_layer=True)
        values = {w.path.split("/", 1)[1]: w.numpy() for w in shared.weights}
        for weight in per_layer.weights:
            path = weight.path.split("/", 1)[1]
            weight.assign(values[re.sub(r"relative_bias_\d+", "relative_bias", path)])
        source, target = random_ids(2, 7), random_ids(2, 6, seed=1)
        self.assertAllClose(per_layer((source, target)), shared((source, target)), atol=1e-6)
        before = per_layer.encode_with_attention(source)
        table = per_layer.encoder.relative_bias_1.embeddings  # (buckets, heads); a change the softmax sees
        table.assign(table + np.linspace(0.0, 2.0, table.shape[0])[:, None].astype("float32"))
        after = per_layer.encode_with_attention(source)
        self.assertAllClose(after.weights[0], before.weights[0])
        self.assertGreater(float(np.max(np.abs(after.weights[1] - before.weights[1]))), 1e-3)

    def test_cached_decoding_with_the_relative_bias_is_the_whole_sequence(self):
        for per_layer in (False, True):
            model = t5_model(relative_bias_per_layer=per_layer)
            source, target = random_ids(2, 7), random_ids(2, 6, seed=1)
            full = model((source, target))
            memory, mask = model.encode(source), model.source_mask(source)
            for slots in (6, None):
                cache, steps = model.init_cache(memory, slots), []
                for i in range(6):
                    step = model.decode_step(target[:, i:i + 1], cache, i, mask, growing=slots is None)
                    cache = step.cache
                    steps.append(step.logits)
                with self.subTest(per_layer=per_layer, slots=slots):
                    self.assertAllClose(np.concatenate(steps, axis=1), full, atol=1e-5)

    def test_the_tied_output_scale_divides_the_logits_by_sqrt_d_model(self):
        scaled, plain = t5_model(scale_decoder_output=True), t5_model()
        plain.set_weights(scaled.get_weights())
        source, target = random_ids(2, 5), random_ids(2, 4, seed=1)
        self.assertAllClose(scaled((source, target)), np.asarray(plain((source, target))) / math.sqrt(16), atol=1e-5)

    def test_every_switch_serializes(self):
        for per_layer in (False, True):
            model = t5_model(scale_decoder_output=True, relative_bias_per_layer=per_layer)
            clone = Transformer.from_config(model.get_config())
            clone.build()
            clone.set_weights(model.get_weights())
            self.assertEqual(clone.get_config(), model.get_config())
            self.assertEqual(clone.get_config()["relative_bias_per_layer"], per_layer)
            source, target = random_ids(2, 5), random_ids(2, 4, seed=1)
            self.assertAllClose(clone((source, target)), model((source, target)))

    def test_the_defaults_are_the_papers_model(self):
        model = tiny_transformer()
        self.assertIsNotNone(model.source_position)
        self.assertIsNone(model.encoder.relative_bias)
        self.assertFalse(model.relative_bias_per_layer)
        self.assertIsInstance(model.encoder.blocks[0].feed_forward_connection.layer_norm, layers.LayerNormalization)
        self.assertIsNone(model.encoder.blocks[0].feed_forward.gate)
        self.assertTrue(model.encoder.blocks[0].self_attention.attention.scale)


class ConfigTest(TestCase):
    def test_relative_positions_for_runs_trained_here(self):
        for placement in ("true", "false"):
            config = load_config("tiny", ["model.position_encoding=relative", f"model.normalize_first={placement}"])
            model = build_model(config.model)
            self.assertIsNotNone(model.decoder.relative_bias)
            self.assertEqual(model.decoder.relative_bias.num_buckets, 32)

    def test_bad_values_are_refused_naming_the_key(self):
        for overrides, pattern in ((["model.relative_buckets=2"], "relative_buckets must be an integer >= 4"),
                                   (["model.relative_max_distance=8", "model.relative_buckets=32"],
                                    "relative_max_distance"),
                                   (["model.normalization=batch"], "normalization must be one of"),
                                   (["model.use_bias=maybe"], "use_bias"),
                                   (["model.architecture=decoder_only", "model.position_encoding=relative"],
                                    "position_encoding=relative is implemented for the encoder-decoder"),
                                   (["model.relative_bias_per_layer=true"],
                                    "relative_bias_per_layer gives each layer's self-attention a relative position "
                                    "table, but model.position_encoding='sinusoidal'"),
                                   (["model.position_encoding=relative", "model.relative_bias_per_layer=3"],
                                    "relative_bias_per_layer=3")):
            with self.subTest(overrides=overrides), self.assertRaisesRegex(ConfigError, pattern):
                load_config("tiny", overrides)


class ParameterCountTest(TestCase):
    def test_the_closed_form_count_is_the_models(self):
        from t2t_keras.params import count_parameters

        for overrides in ([], ["model.position_encoding=relative", "model.normalization=rms", "model.use_bias=false",
                               "model.gated_feed_forward=true", "model.normalize_first=true",
                               "model.tie_embeddings=none"],
                          ["model.position_encoding=relative", "model.relative_bias_per_layer=true",
                           "model.num_decoder_layers=3"]):
            config = load_config("tiny", overrides)
            model = build_model(config.model)
            with self.subTest(overrides=overrides):
                self.assertEqual(count_parameters(config.model)["total"], model.count_params())
