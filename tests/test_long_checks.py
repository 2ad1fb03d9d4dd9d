"""The runner's split of the suite: tests marked `long_check` (a class or one test) run only with `--long`."""

import unittest

from tests import runner
from tests.helpers import long_check
from tests.runner import select


def sample_suite():
    """A suite of a class with one marked test, a marked class and a subclass of it (defined here, so that the
    loader does not run them as this module's tests)."""

    class Quick(unittest.TestCase):
        def test_a(self):
            self.fail("a sample for select(), never run")

        @long_check
        def test_b(self):
            self.fail("a sample for select(), never run")

    @long_check
    class Slow(unittest.TestCase):
        def test_c(self):
            self.fail("a sample for select(), never run")

    class SlowerStill(Slow):
        def test_d(self):
            self.fail("a sample for select(), never run")

    load = unittest.defaultTestLoader.loadTestsFromTestCase
    return unittest.TestSuite([load(Quick), load(Slow), load(SlowerStill)])


def names(suite):
    return sorted(test.id().rsplit(".", 2)[-1] for test in suite)


class SelectTest(unittest.TestCase):
    def test_the_suite_leaves_out_marked_classes_their_subclasses_and_marked_tests(self):
        suite, left_out = select(sample_suite(), long=False)
        self.assertEqual(names(suite), ["test_a"])
        self.assertEqual(left_out, 4)

    def test_long_runs_only_what_is_marked(self):
        suite, left_out = select(sample_suite(), long=True)
        self.assertEqual(names(suite), ["test_b", "test_c", "test_c", "test_d"])
        self.assertEqual(left_out, 1)

    def test_a_module_that_fails_to_import_is_kept_either_way(self):
        broken = unittest.defaultTestLoader.loadTestsFromName("tests.no_such_module_here")
        for long in (False, True):
            suite, _ = select(broken, long)
            self.assertEqual(suite.countTestCases(), 1)


SAMPLE_MODULE = '''
import unittest


class Sample(unittest.TestCase):
    def test_passes(self):
        pass

    def test_fails(self):
        self.assertEqual(1 + 1, 3, "the sample's own message")
'''


class FailureListTest(unittest.TestCase):
    def test_the_last_lines_name_each_failed_test_with_the_end_of_its_traceback(self):
        """CI shows the end of a long log: the failures are repeated there, before the final count."""
        import os
        import pathlib
        import subprocess
        import sys
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            pathlib.Path(folder, "runner_sample.py").write_text(SAMPLE_MODULE)
            root = str(pathlib.Path(__file__).resolve().parents[1])
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([folder, root]))
            done = subprocess.run([sys.executable, "-m", "tests.runner", "runner_sample"], cwd=root, env=env,
                                  capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        lines = done.stdout.splitlines()
        self.assertEqual(lines[-1], "1 passed, 1 failed, 0 skipped")
        self.assertTrue(lines[-2].startswith("ran in "), lines[-2])
        failed = lines.index("FAILED runner_sample.Sample.test_fails")
        self.assertEqual([line for line in lines if line.startswith("FAILED runner_sample")], [lines[failed]])
        self.assertEqual(lines[-3], "    AssertionError: 2 != 3 : the sample's own message")
        self.assertLessEqual(len(lines) - 2 - failed - 1, runner.FAILURE_LINES)
