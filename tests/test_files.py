"""Atomic writes: a reader sees the old content or the new, and a failure leaves no partial output."""

import os
import pathlib
import tempfile
import unittest
from unittest import mock

from t2t_keras import files


class AtomicFileTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def test_text_is_written_and_replaced(self):
        path = self.root / "sub" / "a.txt"
        files.write_text_atomic(path, "eins")
        files.write_text_atomic(path, "zwei")
        self.assertEqual(path.read_text(encoding="utf-8"), "zwei")
        self.assertEqual(os.listdir(path.parent), ["a.txt"])

    def test_failed_rename_keeps_the_old_file_and_no_temporary_one(self):
        path = self.root / "a.txt"
        path.write_text("old")
        with mock.patch.object(files.os, "replace", side_effect=OSError("disk full")):
            with self.assertRaises(OSError):
                files.write_bytes_atomic(path, b"new")
        self.assertEqual(path.read_text(), "old")
        self.assertEqual(os.listdir(self.root), ["a.txt"])


class StagedDirectoryTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.out = pathlib.Path(self._tmp.name) / "export"

    def tearDown(self):
        self._tmp.cleanup()

    def test_appears_complete_only_when_the_block_succeeds(self):
        with files.staged_directory(self.out) as staging:
            (staging / "model.bin").write_bytes(b"x")
            self.assertFalse(self.out.exists())
        self.assertEqual(sorted(p.name for p in self.out.iterdir()), ["model.bin"])
        self.assertEqual(os.listdir(self.out.parent), ["export"])  # no staging directory left

    def test_a_failure_leaves_nothing(self):
        with self.assertRaisesRegex(RuntimeError, "converter failed"):
            with files.staged_directory(self.out) as staging:
                (staging / "half.bin").write_bytes(b"x")
                raise RuntimeError("converter failed")
        self.assertEqual(os.listdir(self.out.parent), [])

    def test_existing_output_needs_overwrite_and_survives_a_failed_replacement(self):
        self.out.mkdir()
        (self.out / "old.bin").write_bytes(b"old")
        with self.assertRaisesRegex(FileExistsError, "overwrite"):
            with files.staged_directory(self.out):
                pass
        with self.assertRaises(RuntimeError):
            with files.staged_directory(self.out, overwrite=True):
                raise RuntimeError("failed")
        self.assertEqual([p.name for p in self.out.iterdir()], ["old.bin"])
        with files.staged_directory(self.out, overwrite=True) as staging:
            (staging / "new.bin").write_bytes(b"new")
        self.assertEqual([p.name for p in self.out.iterdir()], ["new.bin"])
        self.assertEqual(os.listdir(self.out.parent), ["export"])


if __name__ == "__main__":
    unittest.main()
