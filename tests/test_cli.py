"""The `t2t-keras` command line: `describe` and a refused `train`, in this process (`cli_in_process`) but for one
test that starts `python -m t2t_keras` as a user would."""

import json
import os
import subprocess
import sys
import tempfile

import tensorflow as tf

from tests.helpers import TestCase, cli_in_process


def run_process(*args):
    return subprocess.run([sys.executable, "-m", "t2t_keras", *args], capture_output=True, text=True, timeout=120)


def run_cli(*args):
    """`cli_in_process` with its output as text, like `run_process`'s."""
    result = cli_in_process(*args)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode("utf-8"),
                                       result.stderr.decode("utf-8"))


class DescribeTest(TestCase):
    def test_json_for_base_with_the_paper_vocabulary(self):
        result = run_process("describe", "--config", "base", "--vocab-size", "40000", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        info = json.loads(result.stdout)
        for key in ("params", "hidden_dim", "num_layers", "num_heads", "intermediate_dim", "vocab_size"):
            self.assertIn(key, info)
        self.assertEqual((info["hidden_dim"], info["num_layers"], info["vocab_size"]), (512, 6, 40000))
        self.assertAlmostEqual(info["params"] / 1e6, 65, delta=1.0)

    def test_text_output_and_overrides(self):
        result = run_cli("describe", "--config", "tiny", "--set", "model.num_heads=8")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("h=8", result.stdout)
        self.assertIn("parameters:", result.stdout)

    def test_every_architecture(self):
        from t2t_keras.config import load_config
        from t2t_keras.params import count_parameters

        for architecture in ("encoder_decoder", "decoder_only", "encoder_only"):
            with self.subTest(architecture=architecture):
                result = run_cli("describe", "--config", "tiny", "--set", f"model.architecture={architecture}",
                                 "--json")
                self.assertEqual(result.returncode, 0, result.stderr)
                info = json.loads(result.stdout)
                expected = count_parameters(load_config("tiny", [f"model.architecture={architecture}"]).model)
                self.assertEqual((info["architecture"], info["params"]), (architecture, expected["total"]))
        with tempfile.TemporaryDirectory() as tmp:
            training = run_cli("train", "--config", "lm-mini", "--run-dir", f"{tmp}/run",
                               "--set", "training.task=translation")
            self.assertEqual(training.returncode, 2)
            self.assertIn("does not match model.architecture='decoder_only'", training.stderr)
            self.assertFalse(os.path.exists(f"{tmp}/run"))  # refused before writing anything

    def test_every_tokenizer(self):
        from t2t_keras.config import load_config
        from t2t_keras.params import count_parameters

        expected = count_parameters(load_config("tiny").model)["total"]
        for tokenizer in ("bpe", "unigram", "wordpiece"):
            with self.subTest(tokenizer=tokenizer):
                result = run_cli("describe", "--config", "tiny", "--set", f"data.tokenizer={tokenizer}", "--json")
                self.assertEqual(result.returncode, 0, result.stderr)
                info = json.loads(result.stdout)
                self.assertEqual((info["tokenizer"], info["architecture"], info["params"]),
                                 (tokenizer, "encoder_decoder", expected))
        result = run_cli("describe", "--config", "tiny", "--set", "data.tokenizer=sentencepiece")
        self.assertEqual(result.returncode, 2)
        self.assertIn("data.tokenizer must be one of ['bpe', 'unigram', 'wordpiece', 'pretrained']", result.stderr)

    def test_bad_config_is_a_clear_error(self):
        result = run_cli("describe", "--config", "base", "--set", "model.hidden_dim=500")
        self.assertEqual(result.returncode, 2)
        self.assertIn("hidden_dim=500 is not divisible by model.num_heads=8", result.stderr)


if __name__ == "__main__":
    tf.test.main()


class ErrorLinesTest(TestCase):
    """An error raised for what the user gave is one line and exit status 2; any other error, even a
    FileNotFoundError from inside the package, keeps its traceback (a bug must not pass for a user's mistake)."""

    def test_a_missing_input_file_is_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, "nowhere.txt")
            done = cli_in_process("score", "--saved-model", tmp, "--input", missing)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stderr.decode().strip().splitlines(),
                         [f"t2t-keras score: error: {missing} does not exist or is not a file: give the input file's "
                          "path, or no --input to read standard input."])

    def test_an_internal_file_error_keeps_its_traceback(self):
        from unittest import mock

        from t2t_keras import cli

        for error in (FileNotFoundError("/internal/cache/file"), FileExistsError("/internal/tmp")):
            with self.subTest(type(error).__name__):
                with mock.patch.dict(cli.COMMANDS, describe=mock.Mock(side_effect=error)):
                    with self.assertRaises(type(error)):
                        cli.main(["describe", "--config", "tiny"])

    def test_the_users_path_errors_are_also_file_errors(self):
        from t2t_keras.errors import MissingPathError, PathExistsError, T2TError

        self.assertTrue(issubclass(MissingPathError, FileNotFoundError) and issubclass(MissingPathError, T2TError))
        self.assertTrue(issubclass(PathExistsError, FileExistsError) and issubclass(PathExistsError, T2TError))
