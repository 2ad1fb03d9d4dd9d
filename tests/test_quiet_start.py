"""A command prints only its own lines: TensorFlow's start-up lines are dropped unless the user asks for them
(`--verbose`, or a TF_CPP_MIN_LOG_LEVEL of their own), and any other line TensorFlow writes still shows."""

import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest

from t2t_keras.quiet_start import STARTUP_LINES, info_hidden, is_startup_line, native_lines_dropped, wants_quiet

ROOT = pathlib.Path(__file__).resolve().parent.parent
REAL_WARNING = "W0000 00:00:1.0 1 some_op.cc:1] a warning of TensorFlow's own that a user must see"

# A stand-in `tensorflow` package: writes two start-up lines and a real warning to file descriptor 2 on import, as
# TensorFlow's C++ runtime does (below Python's sys.stderr), or fails its import when T2T_FAKE_FAIL is set.
FAKE_TENSORFLOW = textwrap.dedent(f"""
    import os
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
    os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on. You may see slightly different results.\\n")
    os.write(2, {REAL_WARNING!r}.encode() + b"\\n")
    if os.environ.get("T2T_FAKE_FAIL"):
        raise ImportError("libtensorflow_framework.so.2: cannot open shared object file")

    class config:
        @staticmethod
        def list_physical_devices(kind):
            os.write(2, b"E0000 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\\n")
            return []
""")


def environment(**changes):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(changes)
    return env


class StartupLinesTest(unittest.TestCase):
    def test_the_known_lines_are_recognised_and_others_are_not(self):
        self.assertTrue(is_startup_line("I0000 00:00:1796432508.72 12111 cudart_stub.cc:31] Could not find cuda "
                                        "drivers on your machine, GPU will not be used."))
        self.assertTrue(all(is_startup_line(f"prefix {line} suffix") for line in STARTUP_LINES))
        self.assertFalse(is_startup_line(REAL_WARNING))
        self.assertFalse(is_startup_line("Traceback (most recent call last):"))

    def test_quiet_unless_verbose_or_the_users_own_log_level(self):
        self.assertTrue(wants_quiet(False, {}))
        self.assertFalse(wants_quiet(True, {}))
        self.assertFalse(wants_quiet(False, {"TF_CPP_MIN_LOG_LEVEL": "0"}))


class NativeLinesDroppedTest(unittest.TestCase):
    """What native code writes to file descriptor 2 in the block: the known lines dropped, the others written back
    (LiteRT's first call logs "Created TensorFlow Lite XNNPACK delegate" so)."""

    def written_to_fd2(self, block):
        with tempfile.TemporaryFile() as outer:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(outer.fileno(), 2)
            try:
                block()
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
            outer.seek(0)
            return outer.read().decode()

    def test_known_lines_are_dropped_and_the_others_written_back(self):
        def block():
            with native_lines_dropped(("XNNPACK delegate",)):
                os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
                os.write(2, REAL_WARNING.encode() + b"\n")

        self.assertEqual(self.written_to_fd2(block), REAL_WARNING + "\n")

    def test_a_failing_block_writes_back_everything_and_raises(self):
        def block():
            with self.assertRaises(RuntimeError):
                with native_lines_dropped(("XNNPACK delegate",)):
                    os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
                    raise RuntimeError("the interpreter failed")

        self.assertIn("XNNPACK delegate", self.written_to_fd2(block))

    def test_info_is_hidden_from_log_level_1(self):
        self.assertEqual([info_hidden({"TF_CPP_MIN_LOG_LEVEL": v}) for v in ("0", "1", "2", "x")],
                         [False, True, True, False])
        self.assertFalse(info_hidden({}))


class QuietImportTest(unittest.TestCase):
    """`import_tensorflow_quietly` in a fresh interpreter whose `tensorflow` is the stand-in above."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        (pathlib.Path(cls.tmp.name) / "tensorflow.py").write_text(FAKE_TENSORFLOW, encoding="utf-8")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_import(self, verbose=False, **env):
        code = (f"from t2t_keras.quiet_start import import_tensorflow_quietly; "
                f"import_tensorflow_quietly({verbose}); print('imported')")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                              env=environment(PYTHONPATH=f"{self.tmp.name}{os.pathsep}{ROOT}", **env))

    def test_start_up_lines_are_dropped_and_a_real_warning_is_kept(self):
        done = self.run_import()
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout, "imported\n")
        self.assertEqual(done.stderr, REAL_WARNING + "\n")

    def test_verbose_or_the_users_log_level_keeps_every_line(self):
        for done in (self.run_import(verbose=True), self.run_import(TF_CPP_MIN_LOG_LEVEL="1")):
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("oneDNN custom operations are on", done.stderr)
            self.assertIn("absl::InitializeLog", done.stderr)
            self.assertIn(REAL_WARNING, done.stderr)

    def test_a_failed_import_shows_everything_it_wrote_then_the_error(self):
        done = self.run_import(T2T_FAKE_FAIL="1")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("oneDNN custom operations are on", done.stderr)
        self.assertIn(REAL_WARNING, done.stderr)
        self.assertLess(done.stderr.index(REAL_WARNING), done.stderr.index("cannot open shared object file"))


class CommandOutputTest(unittest.TestCase):
    """`t2t-keras describe`, a real process with the real TensorFlow, as a new user runs it."""

    def describe(self, *args, **env):
        return subprocess.run([sys.executable, "-m", "t2t_keras", "describe", "--config", "tiny", *args],
                              capture_output=True, text=True, cwd=ROOT, env=environment(**env))

    def test_describe_prints_only_its_own_lines(self):
        done = self.describe()
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith("Transformer: N=2"), done.stdout)
        self.assertEqual([line for line in done.stderr.splitlines() if is_startup_line(line)], [])

    def test_verbose_shows_tensorflows_start_up(self):
        done = self.describe("--verbose")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(any(is_startup_line(line) for line in done.stderr.splitlines()), done.stderr)


if __name__ == "__main__":
    unittest.main()
