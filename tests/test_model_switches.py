"""The model's switches for imported checkpoints: each against its closed form, its config check, its serialization;
their defaults are today's model."""

import math

import numpy as np
import tensorflow as tf

from t2t_keras import layers
from t2t_keras.config import ConfigError, from_dict, load_config
from t2t_keras.model import Transformer, build_transformer
from t2t_keras.special_ids import SpecialIds
from tests.helpers import TestCase, random_ids, tiny_transformer


def marian_table(length, dim):
    """transformers' MarianSinusoidalPositionalEmbedding.create_weight, in numpy."""
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(length)])
    sentinel = (dim + 1) // 2
    table = np.empty((length, dim))
    table[:, :sentinel], table[:, sentinel:] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
    return table


def fairseq_table(length, dim, padding_idx=1):
    """fairseq's SinusoidalPositionalEmbedding.get_embedding rows `padding_idx + 1 ...`, in numpy."""
    half = dim // 2
    frequencies = np.exp(np.arange(half) * -(math.log(10000) / (half - 1)))
    angles = np.arange(length + padding_idx + 1)[:, None] * frequencies[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles), np.zeros((len(angles), dim % 2))], axis=1)
    return table[padding_idx + 1:]


class PositionLayoutTest(TestCase):
    def test_split_is_marians_table(self):
        for dim in (16, 7):
            layer = layers.SinusoidalPositionEncoding(layout="split")
            self.assertAllClose(layer.encoding(30, dim), marian_table(30, dim), atol=1e-5)

    def test_fairseq_is_fairseqs_table_from_padding_id_plus_one(self):
        for dim in (16, 9):
            layer = layers.SinusoidalPositionEncoding(layout="fairseq", offset=2)
            self.assertAllClose(layer.encoding(30, dim), fairseq_table(30, dim), atol=1e-5)
            self.assertAllClose(layer.encoding(5, dim, start_index=7), fairseq_table(12, dim)[7:], atol=1e-5)

    def test_the_interleaved_default_is_unchanged(self):
        table = layers.SinusoidalPositionEncoding().encoding(4, 6)
        self.assertAllClose(table[3, :2], [math.sin(3.0), math.cos(3.0)])
        self.assertAllClose(table[3, 4:], [math.sin(3 / 10000 ** (4 / 6)), math.cos(3 / 10000 ** (4 / 6))])


class SwitchesTest(TestCase):
    def test_unscaled_embeddings_are_the_rows(self):
        layer = layers.TokenEmbedding(vocab_size=5, hidden_dim=4, scale=False)
        self.assertAllClose(layer(np.arange(5)[None])[0], layer.embeddings)

    def test_the_logits_bias_is_added_to_every_logit_and_to_a_shortlists(self):
        model = tiny_transformer(final_logits_bias=True, dropout=0.0)
        plain = tiny_transformer(dropout=0.0)
        plain.set_weights([w for w, v in zip(model.get_weights(), model.weights) if "logits_bias" not in v.path])
        bias = np.random.default_rng(0).normal(size=50).astype("float32")
        model.logits_bias.bias.assign(bias)
        source, target = random_ids(2, 5), random_ids(2, 4, seed=1)
        self.assertAllClose(model((source, target)), plain((source, target)) + bias, atol=1e-5)
        ids = tf.constant([7, 3, 40], tf.int32)
        memory = model.encode(source)
        step = model.decode_step(target[:, :1], model.init_cache(memory, 4), 0, model.source_mask(source),
                                 output_ids=ids)
        full = model.decode(target[:, :1], memory, model.source_mask(source))
        self.assertAllClose(step.logits, tf.gather(full, ids, axis=-1), atol=1e-5)

    def test_the_padding_id_is_the_models_own(self):
        model = tiny_transformer(special_ids={"pad": 7})
        source = random_ids(1, 5, low=8)
        padded = np.concatenate([source, np.full((1, 3), 7, np.int32)], axis=1)
        target = random_ids(1, 4, seed=1, low=8)
        self.assertEqual(model.pad_id, 7)
        self.assertAllClose(model((padded, target)), model((source, target)), atol=1e-5)

    def test_every_switch_serializes(self):
        model = tiny_transformer(scale_embeddings=False, position_sinusoid="fairseq", position_offset=2,
                                 final_logits_bias=True, normalize_first=True, activation="swish",
                                 special_ids=SpecialIds(pad=5, unk=4, bos=0, eos=6, decoder_start=6))
        clone = Transformer.from_config(model.get_config())
        clone.build()
        clone.set_weights(model.get_weights())
        self.assertEqual(clone.get_config(), model.get_config())
        source, target = random_ids(2, 5, low=7), random_ids(2, 4, seed=1, low=7)
        self.assertAllClose(clone((source, target)), model((source, target)))

    def test_a_model_saved_with_its_padding_id_alone_loads(self):
        config = tiny_transformer().get_config()
        for key in ("special_ids", "scale_embeddings", "position_sinusoid", "position_offset", "final_logits_bias"):
            config.pop(key)
        model = Transformer.from_config({**config, "pad_id": 9})
        self.assertEqual(model.special_ids, SpecialIds(pad=9))
        self.assertEqual((model.scale_embeddings, model.position_sinusoid), (True, "interleaved"))


class ConfigTest(TestCase):
    def test_defaults_are_the_papers_and_round_trip_through_yaml_dicts(self):
        config = load_config("tiny", ["model.special_ids={pad: 5, eos: 6}", "model.position_sinusoid=split"])
        self.assertEqual(config.model.special_ids, SpecialIds(pad=5, eos=6))
        self.assertEqual(config.to_dict()["model"]["special_ids"],
                         {"pad": 5, "unk": 1, "bos": 2, "eos": 6, "decoder_start": 2})
        self.assertEqual(from_dict(config.to_dict()), config)
        model = build_transformer(load_config("tiny").model)
        self.assertEqual((model.scale_embeddings, model.final_logits_bias, model.special_ids),
                         (True, False, SpecialIds()))

    def test_values_the_model_cannot_take_are_refused_naming_the_key(self):
        cases = {
            "model.position_encoding=learned": ("model.position_offset=2", "position_offset describe the sinusoidal"),
            "model.special_ids={pad: 0, end: 3}": (None, r"model.special_ids has unknown keys \['end'\]"),
            "model.special_ids={eos: 5000}": (None, "model.special_ids.eos=5000 is not an id of the vocabulary"),
            "model.special_ids={pad: 3}": (None, "pad, unk and eos must be three different ids"),
            "model.activation=elu": (None, "model.activation must be one of"),
            "model.position_sinusoid=fairseq": ("model.hidden_dim=2", "fairseq' divides by d_model / 2 - 1"),
            "model.softmax=adaptive": ("model.final_logits_bias=true", "final_logits_bias adds a bias"),
            "model.architecture=decoder_only": ("model.scale_embeddings=false", "model.scale_embeddings is a switch of"),
            "model.source_vocab_size=30": (None, "tie_embeddings='all' shares one vocabulary"),
        }
        for first, (second, pattern) in cases.items():
            with self.subTest(setting=first):
                with self.assertRaisesRegex(ConfigError, pattern):
                    load_config("tiny", [first] + ([second] if second else []) + ["model.num_heads=1"])

    def test_the_parameter_count_has_the_source_vocabulary_and_the_logits_bias(self):
        from t2t_keras.params import count_parameters

        for tie in ("target", "none"):
            config = load_config("tiny", [f"model.tie_embeddings={tie}", "model.source_vocab_size=700",
                                          "model.final_logits_bias=true"]).model
            model = build_transformer(config)
            model.build()
            self.assertEqual(model.count_params(), count_parameters(config)["total"])

    def test_the_loss_and_metrics_skip_the_models_padding_id(self):
        from t2t_keras.training.trainer import compile_model

        config = load_config("tiny", ["model.special_ids={pad: 7}", "training.jit_compile=false"])
        model = compile_model(config, tf.distribute.get_strategy())
        self.assertEqual(model.loss.pad_id, 7)
        self.assertEqual({metric.pad_id for metric in model.metrics[-1].metrics if hasattr(metric, "pad_id")}, {7})


if __name__ == "__main__":
    tf.test.main()
