"""`DecodingParams`: defaults written once, one name per setting, an explicit 0 kept, checked once."""

from t2t_keras import cli
from t2t_keras.config import ConfigError, DecodingConfig, load_config
from t2t_keras.decoding.parameters import DEFAULTS, DecodingParameterError, DecodingParams
from t2t_keras.decoding.translator import Translator
from t2t_keras.export.translator_module import MAX_BEAM_SIZE
from tests.helpers import TestCase, tiny_transformer


class DecodingParamsTest(TestCase):
    def test_the_defaults_are_the_papers_and_the_configs(self):
        self.assertEqual((DEFAULTS.beam_size, DEFAULTS.alpha, DEFAULTS.max_extra_length), (4, 0.6, 50))  # §6.1
        config = DecodingConfig()
        self.assertEqual(DecodingParams.from_config(config), DEFAULTS)
        self.assertEqual(MAX_BEAM_SIZE, config.max_beam_size)
        self.assertIs(Translator(tiny_transformer(), tokenizer=None).params, DEFAULTS)

    def test_given_values_win_and_an_explicit_zero_is_kept(self):
        params = DEFAULTS.updated(beam_size=None, alpha=0.0, max_extra_length=0)
        self.assertEqual((params.beam_size, params.alpha, params.max_extra_length), (4, 0.0, 0))
        self.assertEqual(DEFAULTS.updated(beam_size=1).method, "greedy")
        self.assertEqual(DEFAULTS.method, "beam")

    def test_every_value_is_checked_once_with_its_name(self):
        for given, message in (({"beam_size": 0}, "beam_size must be an integer"),
                               ({"alpha": -1.0}, "alpha must be a finite number >= 0"),
                               ({"max_extra_length": -1}, "max_extra_length must be an integer"),
                               ({"beam_size": 2, "num_return": 3}, r"num_return must be an integer in \[1, beam_size=2\]"),
                               ({"beam_size": True}, "beam_size must be an integer")):
            with self.assertRaisesRegex(DecodingParameterError, message):
                DEFAULTS.updated(**given)
        with self.assertRaisesRegex(DecodingParameterError, r"Unknown decoding parameters \['beam'\]"):
            DEFAULTS.updated(beam=2)

    def test_the_stopping_rule_is_a_config_choice(self):
        self.assertEqual(DecodingConfig().stopping, "beam")  # the fast rule, by default
        self.assertEqual(load_config("tiny", ["decoding.stopping=exact"]).decoding.stopping, "exact")
        with self.assertRaisesRegex(ConfigError, r"stopping.*'beam', 'exact'"):
            load_config("tiny", ["decoding.stopping=early"])
        with self.assertRaisesRegex(ValueError, "stopping must be one of"):
            Translator(tiny_transformer(), tokenizer=None, stopping="early")

    def test_one_name_from_the_config_to_the_flag(self):
        self.assertEqual(load_config("tiny", ["decoding.max_extra_length=7"]).decoding.max_extra_length, 7)
        self.assertEqual(load_config("tiny", ["decoding.extra_length=7"]).decoding.max_extra_length, 7)  # old runs
        with self.assertRaisesRegex(ConfigError, "renamed max_extra_length"):
            load_config("tiny", ["decoding.extra_length=7", "decoding.max_extra_length=8"])
        args = cli.build_parser().parse_args(["translate", "--run-dir", "r", "--beam-size", "2", "--max-extra-length",
                                              "0"])
        self.assertEqual((args.beam_size, args.max_extra_length), (2, 0))
        self.assertEqual(cli.build_parser().parse_args(["translate", "--run-dir", "r", "--extra-length", "3"])
                         .max_extra_length, 3)  # the old spelling of the flag still parses
