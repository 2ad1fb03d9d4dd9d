"""`GenerationRequest`: defaults written once, one name per setting, an explicit 0 kept, checked once, and one
refusal for what an artifact does not honour."""

from t2t_keras import cli_arguments
from t2t_keras.config import ConfigError, DecodingConfig, load_config
from t2t_keras.decoding.parameters import DecodingParameterError
from t2t_keras.decoding.request import DEFAULTS, GenerationRequest, check_accepted
from t2t_keras.errors import T2TError
from t2t_keras.export.translator_module import MAX_BEAM_SIZE
from tests.helpers import TestCase


class GenerationRequestTest(TestCase):
    def test_the_defaults_are_the_papers_and_the_configs(self):
        self.assertEqual((DEFAULTS.beam_size, DEFAULTS.alpha, DEFAULTS.max_extra_length), (4, 0.6, 50))  # §6.1
        self.assertEqual((DEFAULTS.length_penalty, DEFAULTS.stopping, DEFAULTS.num_return), ("gnmt", "beam", 1))
        config = DecodingConfig()
        self.assertEqual(GenerationRequest.from_config(config), DEFAULTS)
        self.assertEqual(MAX_BEAM_SIZE, config.max_beam_size)

    def test_a_run_config_resolves_into_the_request(self):
        decoding = load_config("tiny", ["decoding.length_penalty=average", "decoding.stopping=exact",
                                        "decoding.beam_size=2", "decoding.alignment_heads=[0, 1]"]).decoding
        request = GenerationRequest.from_config(decoding)
        self.assertEqual((request.length_penalty, request.stopping, request.beam_size, request.alignment_heads),
                         ("average", "exact", 2, (0, 1)))

    def test_given_values_win_and_an_explicit_zero_is_kept(self):
        request = DEFAULTS.updated(beam_size=None, alpha=0.0, max_extra_length=0)
        self.assertEqual((request.beam_size, request.alpha, request.max_extra_length), (4, 0.0, 0))
        self.assertEqual(DEFAULTS.updated(beam_size=1).method, "greedy")
        self.assertEqual(DEFAULTS.method, "beam")
        self.assertEqual(request.given(DEFAULTS), ["alpha", "max_extra_length"])

    def test_every_value_is_checked_once_with_its_name(self):
        for given, message in (({"beam_size": 0}, "beam_size must be an integer"),
                               ({"alpha": -1.0}, "alpha must be a finite number >= 0"),
                               ({"max_extra_length": -1}, "max_extra_length must be an integer"),
                               ({"beam_size": 2, "num_return": 3},
                                r"num_return must be an integer in \[1, beam_size=2\]"),
                               ({"beam_size": True}, "beam_size must be an integer"),
                               ({"temperature": -0.5}, "temperature must be a finite number >= 0"),
                               ({"length_penalty": "square"}, "length_penalty must be one of"),
                               ({"constraints": [["ok"], [" "]]}, r"constraints\[1\] holds ' '"),
                               ({"constraints": "rotes Haus"}, "one list of target terms per line")):
            with self.assertRaisesRegex(DecodingParameterError, message):
                DEFAULTS.updated(**given)
        with self.assertRaisesRegex(DecodingParameterError, r"Unknown request fields \['beam'\]"):
            DEFAULTS.updated(beam=2)
        with self.assertRaisesRegex(ValueError, "stopping must be one of"):
            DEFAULTS.updated(stopping="early")

    def test_equal_requests_compare_equal_and_hash_alike(self):
        first = DEFAULTS.updated(constraints=[["rotes Haus"], []], beam_size=2)
        second = GenerationRequest(beam_size=2, constraints=(("rotes Haus",), ()))
        self.assertEqual(first, second)
        self.assertEqual(hash(first), hash(second))

    def test_a_field_an_artifact_does_not_take_is_one_refusal_naming_what_it_takes(self):
        request = DEFAULTS.updated(temperature=0.7, beam_size=1)
        with self.assertRaisesRegex(T2TError, r"temperature \(--temperature\) does not apply to exports/x, a "
                                              r"translation SavedModel, "
                                              r"which takes alpha, beam_size"):
            check_accepted(request, DEFAULTS, {"beam_size", "alpha"}, "exports/x, a translation SavedModel")
        self.assertIs(check_accepted(request, DEFAULTS, {"beam_size", "temperature"}, "x"), request)

    def test_the_stopping_rule_is_a_config_choice(self):
        self.assertEqual(DecodingConfig().stopping, "beam")  # the fast rule, by default
        self.assertEqual(load_config("tiny", ["decoding.stopping=exact"]).decoding.stopping, "exact")
        with self.assertRaisesRegex(ConfigError, r"stopping.*'beam', 'exact'"):
            load_config("tiny", ["decoding.stopping=early"])
        with self.assertRaisesRegex(ConfigError, r"length_penalty.*'gnmt', 'average', 'none'"):
            load_config("tiny", ["decoding.length_penalty=square"])

    def test_one_name_from_the_config_to_the_flag(self):
        self.assertEqual(load_config("tiny", ["decoding.max_extra_length=7"]).decoding.max_extra_length, 7)
        self.assertEqual(load_config("tiny", ["decoding.extra_length=7"]).decoding.max_extra_length, 7)  # old runs
        with self.assertRaisesRegex(ConfigError, "renamed max_extra_length"):
            load_config("tiny", ["decoding.extra_length=7", "decoding.max_extra_length=8"])
        parser = cli_arguments.build_parser()
        args = parser.parse_args(["translate", "--run-dir", "r", "--beam-size", "2", "--max-extra-length", "0"])
        self.assertEqual((args.beam_size, args.max_extra_length), (2, 0))
        self.assertEqual(parser.parse_args(["translate", "--run-dir", "r", "--extra-length", "3"])
                         .max_extra_length, 3)  # the old spelling of the flag still parses
