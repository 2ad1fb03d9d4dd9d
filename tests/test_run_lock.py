"""One writer per run directory (`run_lock.RunLock`): a second writer is refused at once, naming the first; a lock
left by a killed process is taken over with a warning; readers never wait.

`RunLockTest` holds the lock in a small Python process (no TensorFlow: it starts in a fraction of a second);
`WritingCommandsTest` runs a real `t2t-keras train` in a process of its own and the other commands against it.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

from t2t_keras.config import replace
from t2t_keras.errors import RunBusyError
from t2t_keras.run_lock import RunLock
from tests.helpers import TestCase, cli_in_process, toy_config, write_toy_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
ENV.pop("TF_CONFIG", None)
HOLD = """
import sys, time
from t2t_keras.run_lock import RunLock
with RunLock(sys.argv[1], sys.argv[2], "train"):
    print("held", flush=True)
    time.sleep(120)
"""


def lock_of(run_dir):
    """`RunLock` of `run_dir` with the run directory's own file names."""
    from t2t_keras.runs import RunDirectory

    run = RunDirectory(run_dir)
    return RunLock(run.lock_path, run.lock_record_path, "average")


def hold(run_dir):
    """A process holding the lock of `run_dir` as `train` does, once it says so."""
    from t2t_keras.runs import RunDirectory

    run = RunDirectory(run_dir)
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(run.lock_path), str(run.lock_record_path)],
                               stdout=subprocess.PIPE, text=True, cwd=REPO, env=ENV)
    assert process.stdout.readline().strip() == "held"
    return process


class RunLockTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = pathlib.Path(self.tmp.name) / "run"
        self.processes = []

    def tearDown(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            process.stdout.close()
        self.tmp.cleanup()

    def held(self):
        self.processes.append(hold(self.run_dir))
        return self.processes[-1]

    def test_a_second_writer_is_refused_naming_the_first(self):
        holder = self.held()
        with self.assertRaises(RunBusyError) as refused:
            with lock_of(self.run_dir):
                self.fail("took a lock another process holds")
        message = str(refused.exception)
        for part in (f"process {holder.pid} on host {socket.gethostname()}", "t2t-keras train", "run_lock import",
                     f"kill {holder.pid}", "Wait for that process to finish", "t2t-keras average writes it too"):
            self.assertIn(part, message)

    def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_warning(self):
        holder = self.held()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        self.assertTrue((self.run_dir / ".lock.json").exists())  # what the killed process left
        with self.assertLogs("t2t_keras.run_lock", "WARNING") as logs, lock_of(self.run_dir):
            record = json.loads((self.run_dir / ".lock.json").read_text())
            self.assertEqual((record["pid"], record["command"]), (os.getpid(), "average"))
        self.assertIn(f"process {holder.pid} on host", logs.output[0])
        self.assertIn("ended without releasing it", logs.output[0])
        self.assertEqual(list(self.run_dir.iterdir()), [])  # released: no lock file, no record

    def test_a_free_lock_recorded_on_another_machine_is_refused(self):
        self.run_dir.mkdir()
        record = {"pid": 4321, "host": "elsewhere", "command": "train", "command_line": "t2t-keras train",
                  "started": "2025-01-01T00:00:00+00:00"}
        (self.run_dir / ".lock.json").write_text(json.dumps(record))
        with self.assertRaisesRegex(RunBusyError, "process 4321 on host elsewhere.*cannot tell whether that "
                                                  "process still runs.*delete .*\\.lock\\.json"):
            with lock_of(self.run_dir):
                pass

    def test_the_holder_takes_its_lock_again_and_a_refusal_leaves_no_directory(self):
        with lock_of(self.run_dir), lock_of(self.run_dir):  # reentrant: distill trains the student it prepared
            self.assertTrue((self.run_dir / ".lock").exists())
        self.assertFalse(self.run_dir.exists())  # made to hold the lock, empty again: removed
        other = pathlib.Path(self.tmp.name) / "new" / "run"
        with lock_of(other):
            pass
        self.assertFalse((pathlib.Path(self.tmp.name) / "new").exists())


class WritingCommandsTest(TestCase):
    """A `t2t-keras train` process writes a run; the writing commands are refused while it lives, a reader is not,
    and after a SIGKILL the next `train` takes its lock over and resumes."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        tmp = pathlib.Path(cls.tmp.name)
        files = write_toy_corpus(tmp / "data", train=120)
        config = replace(toy_config(files, train_steps=100000, steps_per_epoch=3, checkpoint_every_steps=3),
                         data={"dev_files": None})  # no validation pass to trace
        cls.config_path = tmp / "toy.yaml"
        cls.config_path.write_text(yaml.safe_dump(config.to_dict()))
        cls.run_dir = tmp / "run"
        # On one core: it keeps writing checkpoints, and leaves the other to the commands.
        cls.writer = subprocess.Popen(
            [sys.executable, "-m", "t2t_keras", "train", "--config", str(cls.config_path), "--run-dir",
             str(cls.run_dir), "--minutes", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
            env=dict(ENV, TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1"))
        deadline = time.monotonic() + 240
        while not list((cls.run_dir / "checkpoints").glob("ckpt-*.index")) and time.monotonic() < deadline:
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        if cls.writer.poll() is None:
            cls.writer.kill()
        cls.writer.wait()
        cls.tmp.cleanup()

    def refused(self, *args):
        completed = cli_in_process(*args)
        self.assertEqual(completed.returncode, 2, completed.stderr.decode()[-2000:])
        message = completed.stderr.decode()
        self.assertIn(f"is being written by process {self.writer.pid} on host {socket.gethostname()} "
                      "(t2t-keras train", message)
        self.assertIn(f"kill {self.writer.pid}", message)
        return message

    def test_writers_are_refused_a_reader_is_not_and_a_killed_writer_is_taken_over(self):
        self.assertIsNone(self.writer.poll(), "the writer ended before the commands ran")
        self.refused("train", "--config", self.config_path, "--run-dir", self.run_dir)
        self.refused("average", "--run-dir", self.run_dir)
        self.refused("prepare", "--config", self.config_path, "--run-dir", self.run_dir)
        self.refused("shortlist", "--run-dir", self.run_dir)
        read = cli_in_process("translate", "--run-dir", self.run_dir, "--model", "latest", "--beam-size", "1",
                              stdin=b"the cat sees a dog\n")
        self.assertEqual(read.returncode, 0, read.stderr.decode()[-2000:])
        self.assertEqual(len(read.stdout.decode().splitlines()), 1)
        self.assertIsNone(self.writer.poll(), "the writer ended while the commands ran")
        self.writer.send_signal(signal.SIGKILL)
        self.writer.wait()
        from t2t_keras.runs import checkpoint_paths, checkpoint_step

        killed_at = checkpoint_step(checkpoint_paths(self.run_dir / "checkpoints")[-1])
        with self.assertLogs("t2t_keras", "INFO") as logs:  # to its newest checkpoint: restored, nothing to train
            resumed = cli_in_process("train", "--config", self.config_path, "--run-dir", self.run_dir, "--set",
                                     f"training.train_steps={killed_at}")
        self.assertEqual(resumed.returncode, 0, resumed.stderr.decode()[-2000:])
        self.assertIn(f"from step {killed_at} to {killed_at}", resumed.stdout.decode())
        warnings = [line for line in logs.output if line.startswith("WARNING:t2t_keras.run_lock")]
        self.assertIn(f"process {self.writer.pid} on host", warnings[0])
        self.assertIn("ended without releasing it", warnings[0])
        self.assertTrue(any(f"Resumed from {self.run_dir / 'checkpoints' / f'ckpt-{killed_at}'}" in line
                            for line in logs.output), logs.output)
        self.assertFalse((self.run_dir / ".lock").exists())


if __name__ == "__main__":
    unittest.main()
