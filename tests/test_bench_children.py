"""The benchmark harnesses' children (bench/children.py) end with their harness: a harness stopped by SIGTERM leaves
no training run behind to share the cores with the next measurement."""

import os
import pathlib
import signal
import subprocess
import sys

from tests.helpers import TestCase

HERE = pathlib.Path(__file__).resolve().parents[1]
HARNESS = ("import sys; from bench import children; children.run([sys.executable, '-c', "
           "'import os, time; print(os.getpid(), flush=True); time.sleep(120)'])")


class StoppedHarnessTest(TestCase):
    def test_a_harness_stopped_by_sigterm_stops_its_child_and_exits_143(self):
        harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True, cwd=HERE)
        child = int(harness.stdout.readline())
        harness.send_signal(signal.SIGTERM)
        self.assertEqual(harness.wait(timeout=60), 128 + signal.SIGTERM)
        harness.stdout.close()
        with self.assertRaises(ProcessLookupError, msg="the child outlived its harness"):
            os.kill(child, 0)

    def test_a_child_that_ends_returns_as_subprocess_run_does(self):
        from bench import children
        before = signal.getsignal(signal.SIGTERM)
        result = children.run([sys.executable, "-c", "print('done')"], check=True, text=True, stdout=subprocess.PIPE)
        self.assertEqual(result.stdout, "done\n")
        self.assertIs(signal.getsignal(signal.SIGTERM), before)
