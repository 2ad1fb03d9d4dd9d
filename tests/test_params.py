"""Parameter counts against the paper's Table 3 and against the built Keras model."""

import tensorflow as tf

from t2t_keras.config import load_config, replace
from t2t_keras.model import build_transformer
from t2t_keras.params import count_parameters
from tests.helpers import TestCase

# Table 3 "params x 10^6" with a shared vocabulary of 40,000 tokens (see count_parameters).
PAPER_MILLIONS = {
    "base": 65, "big": 213, "table3-b1": 58, "table3-b2": 60, "table3-c1": 36, "table3-c2": 50,
    "table3-c3": 80, "table3-c4": 28, "table3-c5": 168, "table3-c6": 53, "table3-c7": 90,
}


def _config(preset, **model):
    return replace(load_config(preset), model=dict({"vocab_size": 40000}, **model))


class PaperCountTest(TestCase):
    def test_every_listed_count_within_three_percent(self):
        for preset, millions in PAPER_MILLIONS.items():
            with self.subTest(preset=preset):
                total = count_parameters(_config(preset).model)["total"]
                self.assertLess(abs(total / 1e6 - millions) / millions, 0.03, f"{preset}: {total:,}")

    def test_base_at_37000_merges_has_63_point_1_million(self):
        total = count_parameters(_config("base", vocab_size=37000).model)["total"]
        self.assertAlmostEqual(total / 1e6, 63.1, delta=0.05)


class FormulaMatchesModelTest(TestCase):
    def test_closed_form_equals_count_params_exactly(self):
        variants = [
            ("tiny", {}),
            ("tiny", {"tie_embeddings": "target"}),
            ("tiny", {"tie_embeddings": "none", "normalize_first": True}),
            ("tiny", {"position_encoding": "learned", "key_dim": 8, "value_dim": 24, "num_decoder_layers": 3}),
            ("base", {"vocab_size": 40000}),
        ]
        for preset, model in variants:
            with self.subTest(preset=preset, **model):
                config = replace(load_config(preset), model=model).model
                keras_model = build_transformer(config)
                keras_model.build()
                self.assertEqual(keras_model.count_params(), count_parameters(config)["total"])


if __name__ == "__main__":
    tf.test.main()
