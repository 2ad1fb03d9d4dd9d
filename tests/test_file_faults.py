"""Files written for real against the faults that cost days: a full disk and a damaged file.

A full disk is a clear error (exit 2) naming the path, the space needed and the space free; the previous good
file is still the one that loads, and nothing partial is left behind that a later command could take for whole.
`WriteCutShortTest` makes writes fail part-way in this process (ENOSPC, EDQUOT), wherever the tests run;
`TmpfsTest` fills a real file system, a small tmpfs mounted for it (mounting needs root; where it is not permitted
the class is skipped, saying why).

A damaged file (truncated, or one bit flipped) is found by the sha256 recorded when it was written and named,
with both checksums and the fix (`DamagedFilesTest`): a checkpoint (`train` resumes from the newest whole one,
exactly), a prepared shard, the run's tokenizer and a SavedModel's variables.

The run is the toy one, trained 6 updates with checkpoints at 3 and 6 (dropout on), once for the module; each
test works on a copy.
"""

import errno
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
import yaml

from t2t_keras import files
from t2t_keras.config import replace
from t2t_keras.errors import DiskFullError
from t2t_keras.runs import checkpoint_paths
from tests.helpers import (
    TestCase,
    cli_in_process,
    long_check,
    one_bucket_config,
    tiny_transformer,
    toy_config,
    write_toy_corpus,
)

TRAINED = {}  # the module's trained run: "root", "config_path", "run_dir", "weights_at_6"


def setUpModule():
    root = pathlib.Path(tempfile.mkdtemp(prefix="t2t-file-faults-"))
    # One bucket shape and no dev split: each of the module's trainings traces its training step once.
    config = one_bucket_config(write_toy_corpus(root / "data", train=120, max_words=3))
    assert config.model.dropout > 0, "an exact resume is shown with dropout on"
    config_path = root / "toy.yaml"
    config_path.write_text(yaml.safe_dump(config.to_dict()))
    run_dir = root / "run"
    trained = cli_in_process("train", "--config", config_path, "--run-dir", run_dir)
    assert trained.returncode == 0, trained.stderr.decode()[-2000:]
    TRAINED.update(root=root, config_path=config_path, run_dir=run_dir,
                   weights_at_6=model_weights(str(run_dir / "checkpoints" / "ckpt-6")))


def tearDownModule():
    shutil.rmtree(TRAINED["root"], ignore_errors=True)


def model_weights(checkpoint):
    """The model variables of a tf.train checkpoint, by name."""
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)
            if name.startswith(("model/", "random_state/", "input_position"))}


class _CutShort:
    """A file handle that writes `keep` bytes of the first write, then fails as a full disk does."""

    def __init__(self, handle, keep, code):
        self.handle, self.keep, self.code = handle, keep, code

    def write(self, data):
        self.handle.write(data[:self.keep])
        self.handle.flush()
        raise OSError(self.code, os.strerror(self.code))

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.handle.close()


def cut_short(keep=100, code=errno.ENOSPC):
    """`os.fdopen` whose handles fail part-way through their first write."""
    real = os.fdopen
    return mock.patch.object(os, "fdopen", lambda *args, **kwargs: _CutShort(real(*args, **kwargs), keep, code))


class WriteCutShortTest(TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = pathlib.Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_and_leaves_no_part(self):
        path = self.dir / "manifest.json"
        path.write_text("old")
        with cut_short(), self.assertRaises(DiskFullError) as raised:
            files.write_bytes_atomic(path, b"x" * 2500)
        message = str(raised.exception)
        free = files.format_size(shutil.disk_usage(self.dir).free)
        for part in (f"The disk is full: {path} could not be written (No space left on device)", "needs about 2.5 kB",
                     "is free there", f"{path} is as it was", "run the command again"):
            self.assertIn(part, message)
        self.assertIn(free.split()[1], message)  # the unit of the space free
        self.assertEqual(path.read_text(), "old")
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ["manifest.json"])

    def test_a_quota_is_named_as_such(self):
        with cut_short(code=errno.EDQUOT), self.assertRaisesRegex(DiskFullError, "Disk quota exceeded"):
            files.write_bytes_atomic(self.dir / "shard-00000.ids.npy", b"x" * 10)
        self.assertEqual(list(self.dir.iterdir()), [])

    def test_a_staged_directory_on_a_full_disk_leaves_the_old_one(self):
        out = self.dir / "export"
        out.mkdir()
        (out / "saved_model.pb").write_text("old export")
        with self.assertRaises(DiskFullError) as raised:
            with files.staged_directory(out, overwrite=True, needed=5_000_000) as staging:
                (staging / "saved_model.pb").write_text("half of a new one")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(staging / "variables"))
        self.assertIn(f"{out} could not be written", str(raised.exception))
        self.assertIn("needs about 5.0 MB", str(raised.exception))
        self.assertIn(f"{out} is as it was; the partial copy was removed", str(raised.exception))
        self.assertEqual([p.name for p in self.dir.iterdir()], ["export"])
        self.assertEqual((out / "saved_model.pb").read_text(), "old export")

    def test_a_checkpoint_cut_short_is_removed_and_the_previous_one_stays_the_newest(self):
        from t2t_keras.training.checkpoints import CheckpointManager

        model = tiny_transformer()
        model.compile(optimizer="adam")
        model.optimizer.build(model.trainable_variables)
        directory = self.dir / "checkpoints"
        manager = CheckpointManager(directory, model, model.optimizer)
        model.optimizer.iterations.assign(2)
        manager.save()
        size = sum(p.stat().st_size for p in directory.glob("ckpt-2.*") if not p.name.endswith(".json"))
        model.optimizer.iterations.assign(5)

        def full_disk(*args, **kwargs):  # what TensorFlow's writer leaves when the disk fills: part of a data file
            (directory / "ckpt-5_temp").mkdir()
            (directory / "ckpt-5_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 100)
            (directory / "ckpt-5.data-00000-of-00001").write_bytes(b"x" * 100)
            raise tf.errors.ResourceExhaustedError(None, None, f"{directory}/ckpt-5_temp/part-00000-of-00001.data-"
                                                               "00000-of-00001.tempstate1; No space left on device")

        with mock.patch.object(manager.manager, "save", full_disk), self.assertRaises(DiskFullError) as raised:
            manager.save()
        message = str(raised.exception)
        self.assertIn(f"{directory / 'ckpt-5'} could not be written", message)
        self.assertIn(f"needs about {files.format_size(size)} (the size of the previous checkpoint)", message)
        self.assertIn("the newest checkpoint is still ckpt-2 (step 2), and training resumes from it", message)
        self.assertEqual(sorted(p.name for p in directory.iterdir()),
                         ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index", "ckpt-2.sha256.json"])
        self.assertEqual([os.path.basename(p) for p in checkpoint_paths(directory)], ["ckpt-2"])


def fill(directory, leave):
    """Fills the file system of `directory` up to `leave` bytes free, with one file; returns it."""
    filler = pathlib.Path(directory) / "filler"
    size = shutil.disk_usage(directory).free - leave
    with open(filler, "wb") as handle:
        for start in range(0, size, 1 << 20):
            handle.write(b"\0" * min(1 << 20, size - start))
    return filler


@long_check
class TmpfsTest(TestCase):
    """A copy of the module's run on a 24 MB tmpfs, which each test fills but for a little space."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        tmp = pathlib.Path(cls.tmp.name)
        cls.disk = tmp / "disk"
        cls.disk.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(cls.disk)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            cls.tmp.cleanup()
            raise unittest.SkipTest(f"mounting a tmpfs is not permitted here ({mounted.stderr.strip()}): the real "
                                    "full disk is not tested; WriteCutShortTest covers the same code")
        cls.config_path, cls.run_dir = TRAINED["config_path"], cls.disk / "run"
        shutil.copytree(TRAINED["run_dir"], cls.run_dir)

    @classmethod
    def tearDownClass(cls):
        # lazily: a training that failed mid-save may leave a file open there until this process collects it
        subprocess.run(["umount", "--lazy", str(cls.disk)], check=True)
        cls.tmp.cleanup()

    def setUp(self):
        self.filler = None

    def tearDown(self):
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)

    def assert_full_disk_error(self, completed, path):
        message = completed.stderr.decode()
        self.assertEqual(completed.returncode, 2, message[-2000:])
        self.assertIn(f"error: The disk is full: {path} could not be written (No space left on device)", message)
        self.assertRegex(message, r"It needs about [\d.]+ [kMG]B.*, and [\d.]+ [kM]B is free there")
        self.assertNotIn("Traceback", message)
        return message

    def test_a_checkpoint_that_does_not_fit_leaves_the_previous_one_to_resume_from(self):
        checkpoints = self.run_dir / "checkpoints"
        self.filler = fill(self.disk, 1 << 20)  # a checkpoint of the toy run (one layer) takes about 2 MB
        completed = cli_in_process("train", "--config", self.config_path, "--run-dir", self.run_dir, "--set",
                                   "training.train_steps=9")
        message = self.assert_full_disk_error(completed, checkpoints / "ckpt-9")
        self.assertIn("(the size of the previous checkpoint)", message)
        self.assertIn("the newest checkpoint is still ckpt-6 (step 6), and training resumes from it", message)
        self.assertEqual(sorted(p.name for p in checkpoints.iterdir() if "ckpt-9" in p.name), [])
        self.assertEqual([os.path.basename(p) for p in checkpoint_paths(checkpoints)], ["ckpt-3", "ckpt-6"])
        self.filler.unlink()
        resumed = cli_in_process("train", "--config", self.config_path, "--run-dir", self.run_dir, "--set",
                                 "training.train_steps=9")
        self.assertEqual(resumed.returncode, 0, resumed.stderr.decode()[-2000:])
        self.assertIn("from step 6 to 9", resumed.stdout.decode())

    def test_an_export_that_does_not_fit_leaves_nothing(self):
        out = self.disk / "export"
        self.filler = fill(self.disk, 256 << 10)
        completed = cli_in_process("export", "--run-dir", self.run_dir, "--out", out, "--model", "latest")
        message = self.assert_full_disk_error(completed, out)
        self.assertIn(f"Nothing of {out} was kept; the partial copy was removed", message)
        self.assertFalse(out.exists())
        self.assertEqual([p.name for p in self.disk.iterdir() if p.name.startswith(".")], [])  # no staged copy

    def test_a_shard_that_does_not_fit_is_named_and_the_preparation_resumes(self):
        run = self.disk / "prepared-run"
        run.mkdir()
        shutil.copy(self.run_dir / "tokenizer.model", run)  # the run's vocabulary: the shards are the first write
        data = pathlib.Path(self.tmp.name) / "large"
        config = replace(toy_config(write_toy_corpus(data, train=3000)), data={"dev_files": None})
        config_path = data / "toy.yaml"
        config_path.write_text(yaml.safe_dump(config.to_dict()))
        self.filler = fill(self.disk, 48 << 10)  # the shard's ids take about 90 kB
        completed = cli_in_process("prepare", "--config", config_path, "--run-dir", run)
        self.assert_full_disk_error(completed, run / "prepared" / "shard-00000.ids.npy")
        self.assertEqual(sorted(p.name for p in (run / "prepared").iterdir()), ["manifest.json"])
        self.filler.unlink()
        again = cli_in_process("prepare", "--config", config_path, "--run-dir", run)
        self.assertEqual(again.returncode, 0, again.stderr.decode()[-2000:])
        self.assertIn("in 1 shard", again.stdout.decode())
        np.load(run / "prepared" / "shard-00000.ids.npy")


def flip_bit(path, offset=None):
    """Flips the lowest bit of one byte of `path` (the middle one by default)."""
    data = bytearray(pathlib.Path(path).read_bytes())
    offset = len(data) // 2 if offset is None else offset
    data[offset] ^= 1
    pathlib.Path(path).write_bytes(bytes(data))


def truncate(path):
    """Cuts `path` to half its size, as a copy or a write cut short leaves it."""
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)


class DamagedFilesTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.config_path, cls.run_dir, cls.weights_at_6 = (TRAINED[key] for key in ("config_path", "run_dir",
                                                                                  "weights_at_6"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def copy(self, name):
        copied = self.root / name
        shutil.copytree(self.run_dir, copied)
        return copied

    def command(self, *args, code=0):
        completed = cli_in_process(*args)
        self.assertEqual(completed.returncode, code, completed.stderr.decode()[-3000:])
        return completed.stdout.decode(), completed.stderr.decode()

    def assert_names_damage(self, message, path):
        self.assertIn(f"error: {path} is damaged: its sha256 is ", message)
        self.assertRegex(message, r"its sha256 is [0-9a-f]{64} \(\d+ bytes\), and [0-9a-f]{64} \(\d+ bytes\) was "
                                  "recorded when it was written")
        self.assertNotIn("Traceback", message)

    def test_train_resumes_exactly_from_the_checkpoint_before_a_truncated_one(self):
        run = self.copy("truncated")
        truncate(run / "checkpoints" / "ckpt-6.data-00000-of-00001")
        with self.assertLogs("t2t_keras.training.checkpoints", "WARNING") as logs:
            out, _ = self.command("train", "--config", self.config_path, "--run-dir", run)
        self.assertIn("from step 3 to 6", out)
        self.assertIn(f"Skipping the checkpoint {run / 'checkpoints' / 'ckpt-6'} (step 6): "
                      f"{run / 'checkpoints' / 'ckpt-6.data-00000-of-00001'} is damaged", "\n".join(logs.output))
        self.assertIn(f"Moved the damaged checkpoint(s) at step(s) 6 into {run / 'checkpoints' / 'damaged'}",
                      "\n".join(logs.output))
        self.assertEqual(sorted(p.name for p in (run / "checkpoints" / "damaged").iterdir()),
                         ["ckpt-6.data-00000-of-00001", "ckpt-6.index", "ckpt-6.sha256.json"])
        weights = model_weights(str(run / "checkpoints" / "ckpt-6"))
        self.assertEqual(sorted(weights), sorted(self.weights_at_6))
        for name, value in weights.items():  # trained again from step 3: the same weights as the first time
            self.assertAllClose(value, self.weights_at_6[name], atol=1e-6, rtol=0, msg=name)

    def test_a_flipped_bit_is_named_to_readers_and_train_sets_the_checkpoint_aside(self):
        run = self.copy("flipped")
        data = run / "checkpoints" / "ckpt-6.data-00000-of-00001"
        flip_bit(data)
        _, err = self.command("translate", "--run-dir", run, "--model", "latest", code=2)
        self.assert_names_damage(err, data)
        self.assertIn("t2t-keras train sets a damaged checkpoint aside and resumes from the newest one", err)
        with self.assertLogs("t2t_keras.training.checkpoints", "WARNING") as logs:
            out, _ = self.command("train", "--config", self.config_path, "--run-dir", run, "--set",
                                  "training.train_steps=3")  # resumed at 3: nothing left to train
        self.assertIn("from step 3 to 3", out)
        self.assertIn(f"{data} is damaged", logs.output[0])
        self.assertEqual([os.path.basename(p) for p in checkpoint_paths(run / "checkpoints")], ["ckpt-3"])

    def test_a_damaged_tokenizer_is_named(self):
        run = self.copy("tokenizer")
        flip_bit(run / "tokenizer.model")
        _, err = self.command("translate", "--run-dir", run, code=2)
        self.assert_names_damage(err, run / "tokenizer.model")
        self.assertIn("Restore it from where it came from", err)
        _, err = self.command("train", "--config", self.config_path, "--run-dir", run, code=2)
        self.assert_names_damage(err, run / "tokenizer.model")

    def test_a_damaged_prepared_shard_is_named(self):
        run = self.root / "prepared"
        self.command("prepare", "--config", self.config_path, "--run-dir", run)
        shard = run / "prepared" / "shard-00000.ids.npy"
        flip_bit(shard, offset=os.path.getsize(shard) - 3)  # an id, past the .npy header
        for command in ("prepare", "train"):
            _, err = self.command(command, "--config", self.config_path, "--run-dir", run, code=2)
            self.assert_names_damage(err, shard)
            self.assertIn(f"Move {run / 'prepared'} aside and prepare the corpus again", err)

    def test_a_damaged_saved_model_variables_file_is_named(self):
        export = self.root / "export"
        self.command("export", "--run-dir", self.run_dir, "--out", export, "--model", "latest")
        variables = export / "variables" / "variables.data-00000-of-00001"
        flip_bit(variables)
        for command in ("translate", "serve"):
            _, err = self.command(command, "--saved-model", export, code=2)
            self.assert_names_damage(err, variables)
            self.assertIn(f"export it again (t2t-keras export --run-dir {self.run_dir} --out {export} --overwrite)",
                          err)


if __name__ == "__main__":
    unittest.main()
