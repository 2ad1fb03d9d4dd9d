"""oneDNN or TensorFlow's own kernels for a search, chosen before TensorFlow is imported: from an export's record,
or from the config of the runs a decoding command (`translate`, `evaluate`) opens."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import yaml

from t2t_keras.hardware import Hardware
from t2t_keras.switches.kernels import (
    ALLOCATOR,
    VARIABLE,
    choose_allocator,
    choose_onednn,
    choose_onednn_for_runs,
    export_arithmetic,
    kernels_differ,
    run_arithmetic,
)


def export_with(directory, record):
    """A directory with `record` as its assets.extra/weights.json (None: no record)."""
    extra = pathlib.Path(directory) / "assets.extra"
    extra.mkdir(parents=True)
    if record is not None:
        (extra / "weights.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return directory


def run_with(directory, architecture="encoder_decoder", precision="float32"):
    """A run directory whose config.yaml holds `architecture` and `decoding.precision`."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True)
    config = {"model": {"architecture": architecture}, "training": {"task": None},
              "decoding": {"precision": precision}}
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    return str(directory)


def on_a_cpu(test):
    """`test`'s hardware a CPU, whatever this machine has: the choices tested are a CPU's (a GPU's take none,
    tests/test_hardware_decisions.py); a child process hides its GPUs (`cpu_environment`)."""
    patcher = mock.patch.object(Hardware, "detect", return_value=Hardware(cpu_flags=frozenset({"avx2"}), cores=2))
    patcher.start()
    test.addCleanup(patcher.stop)


def cpu_environment(*without):
    """This process's environment less the variables `without`, with no GPU visible to a child's switches."""
    return {**{k: v for k, v in os.environ.items() if k not in without}, "CUDA_VISIBLE_DEVICES": ""}


class KernelChoiceTest(unittest.TestCase):
    def setUp(self):
        on_a_cpu(self)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def export(self, name, record):
        return export_with(pathlib.Path(self.tmp.name) / name, record)

    def test_the_arithmetic_comes_from_the_record(self):
        cases = {"f32": ({"precision": "float32", "quantization": "float32"}, "float32"),
                 "bf16": ({"precision": "bfloat16", "quantization": "float32"}, "bfloat16"),
                 "int8": ({"precision": "float32", "quantization": "int8"}, "int8"),
                 "older": ({"source": "averaged", "steps": [5]}, None),  # recorded before the precision was
                 "broken": ("{not json", None),
                 "ids-only": (None, None)}
        for name, (record, arithmetic) in cases.items():
            self.assertEqual(export_arithmetic(self.export(name, record)), arithmetic, msg=name)

    def test_only_a_float32_export_turns_onednn_off(self):
        float32 = self.export("f32", {"precision": "float32", "quantization": "float32"})
        environ = {}
        self.assertEqual(choose_onednn(float32, environ, modules={}), "0")
        self.assertEqual(environ, {VARIABLE: "0"})
        for name, record in (("bf16", {"precision": "bfloat16"}), ("int8", {"precision": "float32",
                                                                            "quantization": "int8"})):
            environ = {}
            self.assertIsNone(choose_onednn(self.export(name, record), environ, modules={}), msg=name)
            self.assertEqual(environ, {}, msg=name)

    def test_the_users_setting_and_an_imported_tensorflow_win(self):
        float32 = self.export("f32", {"precision": "float32", "quantization": "float32"})
        environ = {VARIABLE: "1"}
        self.assertIsNone(choose_onednn(float32, environ, modules={}))
        self.assertEqual(environ, {VARIABLE: "1"})
        environ = {}
        self.assertIsNone(choose_onednn(float32, environ, modules={"tensorflow": object()}))  # read already
        self.assertEqual(environ, {})

    def test_the_cli_chooses_before_tensorflow_is_imported(self):
        # a fresh interpreter: the command's arguments parsed, the choice made, TensorFlow not yet loaded
        float32 = self.export("f32", {"precision": "float32", "quantization": "float32"})
        code = ("import os, sys\nfrom t2t_keras import cli_arguments, switches\n"
                "args = cli_arguments.build_parser().parse_args(sys.argv[1:])\n"
                "chosen = switches.choose(args.command, vars(args))\n"
                "print(chosen.get('TF_ENABLE_ONEDNN_OPTS'), os.environ.get('TF_ENABLE_ONEDNN_OPTS'),\n"
                "      'tensorflow' in sys.modules)")
        env = cpu_environment(VARIABLE)
        out = subprocess.run([sys.executable, "-c", code, "translate", "--saved-model", str(float32)],
                             capture_output=True, text=True, env=env, check=True).stdout.split()
        self.assertEqual(out, ["0", "0", "False"])

    def test_a_model_base_path_chooses_for_its_newest_version(self):
        # serve --model-base-path opens the newest numbered version first: its record decides, as for one export
        base = pathlib.Path(self.tmp.name) / "models"
        export_with(base / "1", {"precision": "bfloat16", "quantization": "float32"})
        export_with(base / "10", {"precision": "float32", "quantization": "float32"})
        export_with(base / "incoming", {"precision": "bfloat16"})  # not a version: a copy under way
        code = ("import os, sys\nfrom t2t_keras import cli_arguments, switches\n"
                "args = cli_arguments.build_parser().parse_args(sys.argv[1:])\n"
                "print(switches.choose(args.command, vars(args)).get('TF_ENABLE_ONEDNN_OPTS'))")
        env = cpu_environment(VARIABLE)
        out = subprocess.run([sys.executable, "-c", code, "serve", "--model-base-path", str(base)],
                             capture_output=True, text=True, env=env, check=True).stdout.split()
        self.assertEqual(out, ["0"])
        empty = pathlib.Path(self.tmp.name) / "empty"
        empty.mkdir()
        out = subprocess.run([sys.executable, "-c", code, "serve", "--model-base-path", str(empty)],
                             capture_output=True, text=True, env=env, check=True).stdout.split()
        self.assertEqual(out, ["None"])  # nothing to follow: TensorFlow's default

    def test_a_server_whose_versions_swap_takes_glibcs_allocator_for_onednn(self):
        environ = {}
        self.assertEqual(choose_allocator(True, environ, modules={}), "1")
        self.assertEqual(environ, {ALLOCATOR: "1"})
        for versions_swap, environ, modules in ((False, {}, {}), (True, {ALLOCATOR: "0"}, {}),
                                                (True, {}, {"tensorflow": object()})):
            before = dict(environ)
            self.assertIsNone(choose_allocator(versions_swap, environ, modules=modules))
            self.assertEqual(environ, before)
        base = pathlib.Path(self.tmp.name) / "models"
        export_with(base / "1", {"precision": "bfloat16", "quantization": "float32"})
        code = ("import os, sys\nfrom t2t_keras import cli_arguments, switches\n"
                "args = cli_arguments.build_parser().parse_args(sys.argv[1:])\n"
                "print(switches.choose(args.command, vars(args)).get('TF_ONEDNN_USE_SYSTEM_ALLOCATOR'))")
        env = cpu_environment(VARIABLE, ALLOCATOR)
        for argv, chosen in ((["serve", "--model-base-path", str(base)], "1"),
                             (["serve", "--saved-model", str(base / "1")], "None")):  # one export: no swap
            out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                                 check=True).stdout.split()
            self.assertEqual(out, [chosen], msg=argv)

    def test_a_version_whose_kernels_differ_from_the_processs_is_named(self):
        float32 = self.export("f32", {"precision": "float32", "quantization": "float32"})
        bfloat16 = self.export("bf16", {"precision": "bfloat16", "quantization": "float32"})
        self.assertIsNone(kernels_differ(float32, environ={VARIABLE: "0"}))
        self.assertIsNone(kernels_differ(bfloat16, environ={}))
        self.assertIsNone(kernels_differ(self.export("ids-only", None), environ={VARIABLE: "0"}))
        message = kernels_differ(bfloat16, environ={VARIABLE: "0"})  # started for a float32 version
        self.assertIn("computes in bfloat16 and runs on TensorFlow's own kernels", message)
        self.assertIn("restart the server", message)
        self.assertIn("runs on oneDNN's kernels", kernels_differ(float32, environ={}))

    def test_a_translation_run_that_searches_in_float32_turns_onednn_off(self):
        root = pathlib.Path(self.tmp.name)
        float32, bfloat16 = run_with(root / "f32"), run_with(root / "bf16", precision="bfloat16")
        lm = run_with(root / "lm", architecture="decoder_only")
        self.assertEqual([run_arithmetic(float32), run_arithmetic(bfloat16), run_arithmetic(lm)],
                         ["float32", "bfloat16", None])
        self.assertEqual(run_arithmetic(bfloat16, precision="float32"), "float32")  # --precision wins
        self.assertIsNone(run_arithmetic(root / "no-run"))
        environ = {}
        self.assertEqual(choose_onednn_for_runs([float32], environ=environ, modules={}), "0")
        self.assertEqual(environ, {VARIABLE: "0"})
        for runs, precision in (([float32, bfloat16], None), ([float32], "bfloat16"), ([lm], None), ([], None)):
            environ = {}
            self.assertIsNone(choose_onednn_for_runs(runs, precision, environ=environ, modules={}), msg=runs)
            self.assertEqual(environ, {}, msg=runs)
        self.assertIsNone(choose_onednn_for_runs([float32], environ={VARIABLE: "1"}, modules={}))

    def test_translate_and_evaluate_choose_for_their_runs_and_train_does_not(self):
        run = run_with(pathlib.Path(self.tmp.name) / "f32")
        code = ("import os, sys\nfrom t2t_keras import cli_arguments, switches\n"
                "args = cli_arguments.build_parser().parse_args(sys.argv[1:])\n"
                "chosen = switches.choose(args.command, vars(args))\n"
                "print(chosen.get('TF_ENABLE_ONEDNN_OPTS'), os.environ.get('TF_ENABLE_ONEDNN_OPTS'),\n"
                "      'tensorflow' in sys.modules)")
        env = cpu_environment(VARIABLE)
        for argv, chosen in ((["translate", "--run-dir", run], ["0", "0"]),
                             (["evaluate", "--run-dir", run], ["0", "0"]),
                             (["translate", "--run-dir", run, "--precision", "bfloat16"], ["None", "None"]),
                             (["train", "--run-dir", run], ["None", "None"])):
            out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                                 check=True).stdout.split()
            self.assertEqual(out, [*chosen, "False"], msg=argv)


if __name__ == "__main__":
    unittest.main()
