"""Tests of t2t_keras.data.text_files: strict reading of parallel text and atomic writes."""

import os
import tempfile
from unittest import mock

import tensorflow as tf

from t2t_keras import files
from t2t_keras.data import text_files
from t2t_keras.errors import DataError
from tests.helpers import TestCase


class TextFilesTestBase(TestCase):
    def setUp(self):
        super().setUp()
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)

    def write(self, name, data):
        """Writes str (UTF-8) or bytes to a file in the test directory; returns its path."""
        path = os.path.join(self._tmp.name, name)
        with open(path, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        return path


class ReadParallelFilesTest(TextFilesTestBase):
    def test_reads_aligned_pairs(self):
        source = self.write("train.en", "Hello world.\nThe green house.\n")
        target = self.write("train.de", "Hallo Welt.\nDas grüne Haus.\n")
        self.assertEqual(
            text_files.read_parallel_files(source, target),
            [("Hello world.", "Hallo Welt."), ("The green house.", "Das grüne Haus.")],
        )

    def test_crlf_bom_and_missing_final_newline(self):
        source = self.write("a.en", "\ufeffone\r\ntwo")
        target = self.write("a.de", "eins\r\nzwei\r\n")
        self.assertEqual(
            text_files.read_parallel_files(source, target), [("one", "eins"), ("two", "zwei")]
        )

    def test_unicode_line_separator_is_not_a_line_break(self):
        source = self.write("u.en", "a\u2028b\n")
        target = self.write("u.de", "c\n")
        self.assertEqual(text_files.read_parallel_files(source, target), [("a\u2028b", "c")])

    def test_mismatched_line_counts(self):
        source = self.write("train.en", "a\nb\nc\n")
        target = self.write("train.de", "x\ny\n")
        with self.assertRaises(DataError) as context:
            text_files.read_parallel_files(source, target)
        message = str(context.exception)
        for expected in ("train.en", "train.de", "3 lines", "has 2"):
            self.assertIn(expected, message)

    def test_empty_file(self):
        source = self.write("empty.en", "")
        target = self.write("full.de", "x\n")
        with self.assertRaisesRegex(DataError, "empty.en is empty"):
            text_files.read_parallel_files(source, target)

    def test_missing_file(self):
        target = self.write("full.de", "x\n")
        with self.assertRaisesRegex(DataError, "nowhere.en does not exist"):
            text_files.read_parallel_files(os.path.join(self._tmp.name, "nowhere.en"), target)

    def test_invalid_utf8_names_file_and_line(self):
        source = self.write("bad.en", b"one\ntwo\nthr\xffee\nfour\n")
        target = self.write("good.de", "1\n2\n3\n4\n")
        with self.assertRaises(DataError) as context:
            text_files.read_parallel_files(source, target)
        self.assertIn("bad.en:3", str(context.exception))
        self.assertIn("UTF-8", str(context.exception))

    def test_blank_pairs_are_dropped_and_logged(self):
        source = self.write("b.en", "one\n\nthree\n   \nfive\n")
        target = self.write("b.de", "eins\nzwei\n\nvier\nfünf\n")
        with self.assertLogs("t2t_keras.data.text_files", level="WARNING") as logs:
            pairs = text_files.read_parallel_files(source, target)
        self.assertEqual(pairs, [("one", "eins"), ("five", "fünf")])
        self.assertIn("Dropped 3 of 5 pairs", logs.output[0])

    def test_nothing_logged_when_nothing_dropped(self):
        source = self.write("c.en", "one\n")
        target = self.write("c.de", "eins\n")
        with self.assertNoLogs("t2t_keras.data.text_files", level="WARNING"):
            text_files.read_parallel_files(source, target)


class ReadTsvTest(TextFilesTestBase):
    def test_reads_pairs(self):
        path = self.write("pairs.tsv", "Hello\tHallo\nGood day.\tGuten Tag.\n")
        self.assertEqual(
            text_files.read_tsv(path), [("Hello", "Hallo"), ("Good day.", "Guten Tag.")]
        )

    def test_line_without_tab(self):
        path = self.write("pairs.tsv", "a\tb\nno tab here\n")
        with self.assertRaisesRegex(DataError, r"pairs\.tsv:2 has 0 tab"):
            text_files.read_tsv(path)

    def test_line_with_two_tabs(self):
        path = self.write("pairs.tsv", "a\tb\nc\td\te\n")
        with self.assertRaisesRegex(DataError, r"pairs\.tsv:2 has 2 tab"):
            text_files.read_tsv(path)

    def test_invalid_utf8(self):
        path = self.write("pairs.tsv", b"a\tb\nc\td\n\xc3\x28\tx\n")
        with self.assertRaisesRegex(DataError, r"pairs\.tsv:3 is not valid UTF-8"):
            text_files.read_tsv(path)

    def test_empty_file(self):
        path = self.write("pairs.tsv", "")
        with self.assertRaisesRegex(DataError, r"pairs\.tsv is empty"):
            text_files.read_tsv(path)

    def test_blank_sides_dropped_and_logged(self):
        path = self.write("pairs.tsv", "a\tb\n\tonly target\nonly source\t \n")
        with self.assertLogs("t2t_keras.data.text_files", level="WARNING") as logs:
            pairs = text_files.read_tsv(path)
        self.assertEqual(pairs, [("a", "b")])
        self.assertIn("Dropped 2 of 3 pairs", logs.output[0])


class WriteLinesTest(TextFilesTestBase):
    def test_round_trip(self):
        path = os.path.join(self._tmp.name, "sub", "out.de")
        lines = ["Grüße", "zwei", "drei"]
        text_files.write_lines(path, lines)
        with open(path, "rb") as handle:
            self.assertEqual(handle.read(), "Grüße\nzwei\ndrei\n".encode("utf-8"))

    def test_failed_write_leaves_old_file_and_no_temp_file(self):
        path = self.write("out.txt", "old\n")
        with mock.patch.object(files.os, "replace", side_effect=OSError("disk full")):
            with self.assertRaises(OSError):
                text_files.write_lines(path, ["new"])
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "old\n")
        self.assertEqual(os.listdir(self._tmp.name), ["out.txt"])

    def test_replaces_existing_file(self):
        path = self.write("out.txt", "old\nlonger old content\n")
        text_files.write_lines(path, ["new"])
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "new\n")
        self.assertEqual(os.listdir(self._tmp.name), ["out.txt"])

    def test_line_break_inside_a_line_is_refused(self):
        path = os.path.join(self._tmp.name, "out.txt")
        with self.assertRaisesRegex(DataError, "Line 2 .* contains a line break"):
            text_files.write_lines(path, ["ok", "not\nok"])
        self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    tf.test.main()
