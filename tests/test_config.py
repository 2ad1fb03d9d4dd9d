"""Configuration presets and validation."""

import pathlib
import tempfile

import tensorflow as tf

from t2t_keras.config import available_presets, load_config
from t2t_keras.errors import ConfigError
from tests.helpers import TestCase


class PresetTest(TestCase):
    def test_every_preset_loads(self):
        presets = available_presets()
        for name in ("tiny", "mini", "small", "base", "big", "table3-a1", "table3-c7", "table3-e"):
            self.assertIn(name, presets)
        for name in presets:
            load_config(name)

    def test_table3_rows_change_only_their_fields(self):
        base, a1 = load_config("base"), load_config("table3-a1")
        self.assertEqual((a1.model.num_heads, a1.model.head_key_dim, a1.model.head_value_dim), (1, 512, 512))
        self.assertEqual(a1.model.hidden_dim, base.model.hidden_dim)
        self.assertEqual(load_config("table3-d3").training.label_smoothing, 0.0)
        self.assertEqual(load_config("table3-e").model.position_encoding, "learned")
        big = load_config("big")
        self.assertEqual((big.model.hidden_dim, big.model.intermediate_dim, big.model.num_heads, big.model.dropout),
                         (1024, 4096, 16, 0.3))

    def test_overrides(self):
        config = load_config("tiny", ["model.hidden_dim=128", "training.label_smoothing=0.2"])
        self.assertEqual(config.model.hidden_dim, 128)
        self.assertEqual(config.training.label_smoothing, 0.2)

    def test_the_main_job_preset_trains_on_the_libreoffice_help_alone(self):
        data = load_config("mini").data
        self.assertEqual((data.source, data.sources), ("libreoffice", None))

    def test_naming_a_corpus_replaces_the_inherited_mixture(self):
        with tempfile.TemporaryDirectory() as tmp:
            mixed = pathlib.Path(tmp) / "mixed.yaml"
            mixed.write_text("extends: mini\ndata:\n  sources:\n    - {source: libreoffice, weight: 0.5}\n"
                             "    - {source: debian_descriptions, weight: 0.5}\n")
            self.assertEqual(len(load_config(str(mixed)).data.sources), 2)
            for override in ("data.source=debian_descriptions", "data.train_files=[a.en, a.de]"):
                self.assertIsNone(load_config(str(mixed), [override]).data.sources, override)
            kept = load_config(str(mixed), ["data.vocab_size=8000", "data.source_lang=de", "data.target_lang=en"])
            self.assertEqual(len(kept.data.sources), 2)
            both = load_config(str(mixed), ["data.source=text", "data.train_files=[a.en, a.de]",
                                            "data.sources=[{source: libreoffice}, {source: text, train_files: "
                                            "[a.en, a.de]}]"])
            self.assertEqual([entry["source"] for entry in both.data.sources], ["libreoffice", "text"])
            child = pathlib.Path(tmp) / "mine.yaml"
            child.write_text(f"extends: {mixed}\ndata:\n  source: text\n  train_files: [a.en, a.de]\n")
            self.assertIsNone(load_config(str(child)).data.sources)

    def test_model_vocabulary_defaults_to_the_data_vocabulary(self):
        self.assertEqual(load_config("tiny").model.vocab_size, load_config("tiny").data.vocab_size)


class ValidationTest(TestCase):
    def assertConfigError(self, overrides, *fragments):
        with self.assertRaises(ConfigError) as caught:
            load_config("base", overrides)
        for fragment in fragments:
            self.assertIn(fragment, str(caught.exception))

    def test_unknown_key_names_the_key_and_suggests(self):
        self.assertConfigError(["model.hiden_dim=4"], "hiden_dim", "hidden_dim")

    def test_unknown_section(self):
        self.assertConfigError(["modle.hidden_dim=4"], "modle", "model")

    def test_heads_must_divide_hidden_dim(self):
        self.assertConfigError(["model.hidden_dim=500"], "hidden_dim=500", "num_heads=8", "key_dim")

    def test_explicit_head_sizes_lift_the_divisibility_rule(self):
        config = load_config("base", ["model.hidden_dim=500", "model.key_dim=64", "model.value_dim=64"])
        self.assertEqual(config.model.head_key_dim, 64)

    def test_dropout_range(self):
        self.assertConfigError(["model.dropout=1.0"], "model.dropout", "[0, 1)", "1.0")
        self.assertConfigError(["model.attention_dropout=-0.1"], "attention_dropout")

    def test_sizes_must_be_positive_integers(self):
        self.assertConfigError(["model.num_layers=0"], "model.num_layers", "positive")
        self.assertConfigError(["model.intermediate_dim=abc"], "intermediate_dim", "'abc'")

    def test_decoding_shards_are_auto_or_a_positive_integer(self):
        self.assertEqual(load_config("base").decoding.shards, "auto")
        self.assertEqual(load_config("base", ["decoding.shards=2"]).decoding.shards, 2)
        for bad in ("0", "two", "true", "1.5"):
            self.assertConfigError([f"decoding.shards={bad}"], "decoding.shards must be 'auto' or a positive integer")

    def test_choices(self):
        self.assertConfigError(["model.position_encoding=rotary"], "position_encoding", "sinusoidal", "learned")

    def test_unknown_preset_and_bad_override(self):
        with self.assertRaisesRegex(ConfigError, "Unknown preset 'bass'.*'base'"):
            load_config("bass")
        with self.assertRaisesRegex(ConfigError, "section.key=value"):
            load_config("base", ["hidden_dim=3"])

    def test_yaml_file_with_extends(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "mine.yaml"
            path.write_text("extends: small\nmodel:\n  num_layers: 2\n")
            config = load_config(str(path))
        self.assertEqual((config.model.num_layers, config.model.hidden_dim), (2, 256))


if __name__ == "__main__":
    tf.test.main()
