"""The Debian descriptions corpus: index parsing, pairing by md5, the split by package, cache and errors.

Runs on small Translation-en / Translation-de indexes written in apt's file
layout (plain, gzip and xz); apt is never run.
"""

import collections
import gzip
import hashlib
import json
import lzma
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock

from t2t_keras.config import load_config
from t2t_keras.data import apt_translations as apt
from t2t_keras.data import debian_descriptions as debian
from t2t_keras.data import sources
from t2t_keras.data.corpus import ParallelCorpus
from t2t_keras.data.debian_descriptions import Pair
from t2t_keras.errors import ConfigError, DataError

MIRROR = "deb.debian.org_debian_dists"
# bookworm main's English index: continuation lines, a ` .` separator, verbatim (two-space) lines, a
# package only in English, two packages sharing one description md5, unequal paragraph counts.
ENGLISH = """\
Package: alpha
Description-md5: 0000000000000000000000000000a001
Description-en: tool for alpha
 Alpha reads files
 and writes   them.
 .
 Features:
  - fast
  - small

Package: beta
Description-md5: 0000000000000000000000000000b001
Description-en: beta library
 Beta is a library.

Package: beta-data
Description-md5: 0000000000000000000000000000b001
Description-en: beta library
 Beta is a library.

Package: gamma
Description-md5: 0000000000000000000000000000c001
Description-en: gamma game
 Gamma is a game.
 .
 It has levels.

Package: only-en
Description-md5: 0000000000000000000000000000e001
Description-en: English only
 Nobody translated this.

Package: untranslated
Description-md5: 0000000000000000000000000000f001
Description-en: LibreOffice
 An office suite.
"""
# bookworm-updates: English only, holding the description of a package translated in bookworm main.
ENGLISH_UPDATES = """\
Package: delta
Description-md5: 0000000000000000000000000000d001
Description-en: delta daemon
 Delta serves.
"""
GERMAN = """\
Package: alpha
Description-md5: 0000000000000000000000000000a001
Description-de: Werkzeug für Alpha
 Alpha liest Dateien
 und schreibt sie.
 .
 Funktionen:
  - schnell
  - klein

Package: beta
Description-md5: 0000000000000000000000000000b001
Description-de: Beta-Bibliothek
 Beta ist eine Bibliothek.

Package: beta-data
Description-md5: 0000000000000000000000000000b001
Description-de: Beta-Bibliothek
 Beta ist eine Bibliothek.

Package: gamma
Description-md5: 0000000000000000000000000000c001
Description-de: Gamma-Spiel
 Gamma ist ein Spiel mit Levels.

Package: delta
Description-md5: 0000000000000000000000000000d001
Description-de: Delta-Dienst
 Delta dient.

Package: untranslated
Description-md5: 0000000000000000000000000000f001
Description-de: LibreOffice
 Eine Büro-Suite.

Package: orphan
Description-md5: 00000000000000000000000000009999
Description-de: Waise
 Ohne Englisch.
"""
EXPECTED_PAIRS = [
    Pair("alpha", "short", "tool for alpha", "Werkzeug für Alpha"),
    Pair("alpha", "paragraph", "Alpha reads files and writes them.", "Alpha liest Dateien und schreibt sie."),
    Pair("alpha", "verbatim", "Features: - fast - small", "Funktionen: - schnell - klein"),
    Pair("beta", "short", "beta library", "Beta-Bibliothek"),
    Pair("beta", "paragraph", "Beta is a library.", "Beta ist eine Bibliothek."),
    Pair("beta-data", "short", "beta library", "Beta-Bibliothek"),
    Pair("beta-data", "paragraph", "Beta is a library.", "Beta ist eine Bibliothek."),
    Pair("gamma", "short", "gamma game", "Gamma-Spiel"),
    Pair("delta", "short", "delta daemon", "Delta-Dienst"),
    Pair("delta", "paragraph", "Delta serves.", "Delta dient."),
    Pair("untranslated", "paragraph", "An office suite.", "Eine Büro-Suite."),
]
IN_RELEASE = """\
-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA512

Origin: Debian
Label: Debian
Suite: oldstable
Version: 12.15
Codename: bookworm
Date: Sat, 11 Jul 2026 10:16:37 UTC
"""


def numbered(count):
    """``(english, german)`` index text of ``count`` packages sharing one paragraph, with their own short one."""
    english, german = [], []
    for n in range(count):
        md5 = f"{n:032x}"
        english.append(f"Package: pkg{n:03d}\nDescription-md5: {md5}\nDescription-en: numbered tool {n}\n"
                       " This package is part of the suite.\n")
        german.append(f"Package: pkg{n:03d}\nDescription-md5: {md5}\nDescription-de: Nummeriertes Werkzeug {n}\n"
                      " Dieses Paket gehört zur Suite.\n")
    return "\n".join(english), "\n".join(german)


def write_lists(directory, packages=0):
    """A scratch lists directory as apt leaves it: InRelease files and en (plain, gz) and de (xz) indexes."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    english, german = numbered(packages)
    english, german = ENGLISH + "\n" + english, GERMAN + "\n" + german
    (directory / f"{MIRROR}_bookworm_InRelease").write_text(IN_RELEASE, encoding="utf-8")
    (directory / f"{MIRROR}_bookworm_main_i18n_Translation-en").write_text(english, encoding="utf-8")
    (directory / f"{MIRROR}_bookworm_main_i18n_Translation-de.xz").write_bytes(lzma.compress(german.encode()))
    updates = directory / f"{MIRROR}_bookworm-updates_main_i18n_Translation-en.gz"
    updates.write_bytes(gzip.compress(ENGLISH_UPDATES.encode()))
    return directory


def pairs_of_packages(count, shared=True):
    """Pairs of ``count`` packages: a short description each, and one paragraph all of them share."""
    pairs = []
    for n in range(count):
        pairs.append(Pair(f"p{n}", "short", f"tool {n}", f"Werkzeug {n}"))
        if shared:
            pairs.append(Pair(f"p{n}", "paragraph", "Part of the suite.", "Teil der Suite."))
    return pairs


class TempDirTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)


class ParseTest(unittest.TestCase):
    def test_stanzas_with_continuation_lines(self):
        entries = apt.parse_index(ENGLISH, "en")
        self.assertEqual([e.package for e in entries], ["alpha", "beta", "beta-data", "gamma", "only-en",
                                                        "untranslated"])
        self.assertEqual(entries[0].md5, "0000000000000000000000000000a001")
        self.assertEqual(entries[0].description.split("\n"),
                         ["tool for alpha", "Alpha reads files", "and writes   them.", ".", "Features:",
                          " - fast", " - small"])
        self.assertEqual(apt.parse_index(ENGLISH, "de"), [])  # no Description-de field

    def test_paragraphs_split_at_dot_lines_and_joined_with_spaces(self):
        short, paragraphs = debian.split_description(apt.parse_index(ENGLISH, "en")[0].description)
        self.assertEqual(short, "tool for alpha")
        self.assertEqual(len(paragraphs), 2)
        self.assertEqual(debian.paragraph_text(paragraphs[0]), "Alpha reads files and writes them.")
        self.assertEqual(debian.paragraph_text(paragraphs[1]), "Features: - fast - small")
        self.assertEqual([debian.is_verbatim(p) for p in paragraphs], [False, True])

    def test_empty_paragraphs_and_a_missing_long_description(self):
        self.assertEqual(debian.split_description("only short"), ("only short", []))
        self.assertEqual(debian.split_description("s\n.\nOne.\n.\n.\nTwo."), ("s", [["One."], ["Two."]]))


class ReadIndexTest(TempDirTestCase):
    def test_plain_gzip_and_xz_read_alike(self):
        stem = f"{MIRROR}_bookworm_main_i18n_Translation-de"
        (self.tmp / stem).write_text(GERMAN, encoding="utf-8")
        (self.tmp / f"{stem}.gz").write_bytes(gzip.compress(GERMAN.encode()))
        (self.tmp / f"{stem}.xz").write_bytes(lzma.compress(GERMAN.encode()))
        for name in (stem, f"{stem}.gz", f"{stem}.xz"):
            self.assertEqual(apt.read_index(self.tmp / name), GERMAN)

    def test_lz4_goes_through_apt_helper(self):
        done = subprocess.CompletedProcess([], 0, GERMAN.encode(), b"")
        path = self.tmp / f"{MIRROR}_bookworm_main_i18n_Translation-de.lz4"
        with mock.patch.object(apt.subprocess, "run", return_value=done) as run:
            self.assertEqual(apt.read_index(path), GERMAN)
        self.assertEqual(run.call_args.args[0], ["/usr/lib/apt/apt-helper", "cat-file", str(path)])


class PairDescriptionsTest(unittest.TestCase):
    def test_pairs_by_md5_with_equal_paragraph_counts_only(self):
        english = {e.md5: e.description for e in apt.parse_index(ENGLISH + "\n" + ENGLISH_UPDATES, "en")}
        stats = collections.Counter()
        pairs = debian.pair_descriptions(english, apt.parse_index(GERMAN, "de"), stats)
        self.assertEqual(pairs, EXPECTED_PAIRS)
        self.assertEqual(stats, {"german_without_english": 1, "paragraph_count_differs": 1, "untranslated": 1})
        self.assertNotIn("only-en", {pair.package for pair in pairs})


class SplitByPackageTest(unittest.TestCase):
    def split(self, pairs, **kwargs):
        stats = collections.Counter()
        return debian.split_by_package(pairs, dev_per_mille=150, test_per_mille=150, stats=stats, **kwargs), stats

    def test_no_package_in_two_splits(self):
        splits, _ = self.split(pairs_of_packages(300, shared=False))
        packages = {name: {pair.package for pair in pairs} for name, pairs in splits.items()}
        self.assertFalse(packages["train"] & packages["dev"] or packages["train"] & packages["test"]
                         or packages["dev"] & packages["test"])
        self.assertEqual(sum(len(p) for p in packages.values()), 300)
        self.assertTrue(all(20 < len(packages[name]) < 80 for name in ("dev", "test")), packages)
        for name, names in packages.items():
            self.assertTrue(all(debian.package_split(p, 0, 150, 150) == name for p in names))

    def test_no_dev_or_test_source_in_train_and_repeats_dropped(self):
        splits, stats = self.split(pairs_of_packages(300) + pairs_of_packages(300))
        train_sources = {pair.source for pair in splits["train"]}
        dev_sources = {pair.source for pair in splits["dev"]}
        self.assertIn("Part of the suite.", train_sources)
        self.assertFalse(train_sources & dev_sources)
        self.assertFalse(train_sources & {pair.source for pair in splits["test"]})
        self.assertFalse(dev_sources & {pair.source for pair in splits["test"]})
        for pairs in splits.values():
            self.assertEqual(len(pairs), len({(p.source, p.target) for p in pairs}))
        # 1,200 pairs: 300 short ones repeated once, the shared paragraph kept once of 600 times
        self.assertEqual(sum(len(pairs) for pairs in splits.values()), 301)
        dropped = stats["duplicate"] + stats["dev_source_in_earlier_split"] + stats["test_source_in_earlier_split"]
        self.assertEqual(dropped, 300 + 599)
        self.assertGreater(stats["dev_source_in_earlier_split"], 0)

    def test_deterministic_and_independent_of_order_and_other_packages(self):
        pairs = pairs_of_packages(200, shared=False)
        first, _ = self.split(pairs)
        again, _ = self.split(list(reversed(pairs)))
        fewer, _ = self.split(pairs[:100])
        self.assertEqual({k: set(v) for k, v in first.items()}, {k: set(v) for k, v in again.items()})
        for name in first:
            self.assertEqual(set(fewer[name]), {pair for pair in first[name] if pair in pairs[:100]})
        other_seed, _ = self.split(pairs, seed=1)
        self.assertNotEqual(set(first["test"]), set(other_seed["test"]))


class PrepareCorpusTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        for name, value in (("DEV_PER_MILLE", 200), ("TEST_PER_MILLE", 200)):
            patcher = mock.patch.object(debian, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        self.lists = write_lists(self.tmp / "lists", packages=40)

    def prepare(self):
        return debian.prepare_debian_corpus(cache_dir=self.tmp / "cache", lists_dir=self.lists, update=False)

    def test_writes_split_files_and_provenance(self):
        corpus = self.prepare()
        meta = corpus.metadata()
        self.assertEqual(sorted(p.name for p in corpus.directory.iterdir()),
                         ["SOURCE.json", "dev.de", "dev.en", "test.de", "test.en", "train.de", "train.en"])
        lines = {}
        for split in ("train", "dev", "test"):
            source, target = (path.read_text(encoding="utf-8").splitlines() for path in corpus.files(split))
            self.assertEqual(len(source), meta["counts"][split])
            self.assertEqual(len(target), len(source))
            self.assertGreater(len(source), 0)
            self.assertEqual(sum(meta["kinds"][split].values()), len(source))
            lines[split] = set(source)
        self.assertFalse(lines["train"] & lines["dev"] or lines["train"] & lines["test"])
        # 11 pairs of EXPECTED_PAIRS and 80 numbered ones, less the 2 of beta-data and 39 repeated paragraphs
        self.assertEqual(sum(meta["counts"].values()), 11 + 80 - 2 - 39)
        self.assertEqual(meta["descriptions"], {"english": 46, "german": 47, "paired": 46})
        self.assertEqual(meta["dropped"]["paragraph_count_differs"], 1)
        self.assertEqual(sum(meta["packages"].values()), 45)  # all but orphan and beta-data (repeats beta)
        self.assertEqual(json.loads((corpus.directory / "SOURCE.json").read_text("utf-8")), meta)

    def test_records_the_index_files_and_the_release(self):
        meta = self.prepare().metadata()
        files = {info["file"]: info for info in meta["index_files"]}
        self.assertEqual(sorted(files), sorted(p.name for p in self.lists.glob("*Translation*")))
        german = files[f"{MIRROR}_bookworm_main_i18n_Translation-de.xz"]
        data = (self.lists / german["file"]).read_bytes()
        self.assertEqual((german["bytes"], german["sha256"]), (len(data), hashlib.sha256(data).hexdigest()))
        self.assertEqual((german["lang"], german["suite"], german["component"]), ("de", "bookworm", "main"))
        self.assertEqual(meta["releases"], [{"dists": "bookworm", "component": "main", "origin": "Debian",
                                             "suite": "oldstable", "codename": "bookworm", "version": "12.15",
                                             "date": "Sat, 11 Jul 2026 10:16:37 UTC"}])
        self.assertEqual(meta["split"]["dev_per_mille"], 200)

    def test_second_call_uses_the_cache(self):
        first = self.prepare()
        with mock.patch.object(debian, "build_corpus") as build:
            self.assertEqual(self.prepare(), first)
        build.assert_not_called()

    def test_update_runs_apt_into_the_scratch_lists_only(self):
        done = subprocess.CompletedProcess([], 0, "", "")
        with mock.patch.object(apt.shutil, "which", return_value="/usr/bin/apt-get"), \
                mock.patch.object(apt.subprocess, "run", return_value=done) as run:
            apt.update_lists(self.tmp / "scratch", debian.LANGUAGES)
        command = run.call_args.args[0]
        self.assertEqual(command[:2], ["apt-get", "update"])
        self.assertIn("Acquire::Languages=en,de", command)
        self.assertIn(f"Dir::State::Lists={self.tmp / 'scratch'}", command)
        self.assertIn(f"Dir::Cache={self.tmp / 'scratch-cache'}", command)
        self.assertTrue((self.tmp / "scratch" / "partial").is_dir())


class ErrorsTest(TempDirTestCase):
    def test_no_lists_names_the_command_to_run(self):
        with self.assertRaises(DataError) as caught:
            debian.prepare_debian_corpus(cache_dir=self.tmp / "cache", lists_dir=self.tmp / "lists", update=False)
        message = str(caught.exception)
        self.assertIn("No Translation-en or Translation-de index", message)
        self.assertIn(f"apt-get update -o Acquire::Languages=en,de -o Dir::State::Lists={self.tmp / 'lists'}",
                      message)
        self.assertFalse((self.tmp / "cache").exists())

    def test_missing_apt_names_the_command_unless_lists_are_there(self):
        with mock.patch.object(apt.shutil, "which", return_value=None):
            with self.assertRaisesRegex(DataError, "lacks. On a Debian or Ubuntu machine run `apt-get update"):
                debian.prepare_debian_corpus(cache_dir=self.tmp / "cache", lists_dir=self.tmp / "lists")
            write_lists(self.tmp / "lists")
            corpus = debian.prepare_debian_corpus(cache_dir=self.tmp / "cache", lists_dir=self.tmp / "lists")
        self.assertTrue(corpus.is_complete())

    def test_failed_update_shows_apt_error(self):
        failed = subprocess.CompletedProcess([], 100, "", "E: Could not open lock file")
        with mock.patch.object(apt.shutil, "which", return_value="/usr/bin/apt-get"), \
                mock.patch.object(apt.subprocess, "run", return_value=failed):
            with self.assertRaisesRegex(DataError, "exit 100.*\n.*Could not open lock file"):
                apt.update_lists(self.tmp / "lists", debian.LANGUAGES)


class DataSourceTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        patcher = mock.patch.dict(os.environ, {"T2T_KERAS_CACHE": str(self.tmp / "default-cache")})
        patcher.start()  # a stray call to the real prepare_debian_corpus must not reach the user's cache
        self.addCleanup(patcher.stop)
        which = mock.patch.object(apt.shutil, "which", return_value=None)  # nor apt
        which.start()
        self.addCleanup(which.stop)

    def test_languages_are_checked_by_the_config(self):
        self.assertEqual(load_config("tiny", ["data.source=debian_descriptions"]).data.target_lang, "de")
        load_config("tiny", ["data.source=debian_descriptions", "data.source_lang=de", "data.target_lang=en"])
        with self.assertRaisesRegex(ConfigError, "pairs English and German.*target_lang='fr'"):
            load_config("tiny", ["data.source=debian_descriptions", "data.target_lang=fr"])

    def test_load_pairs_reads_every_split_in_either_direction(self):
        with mock.patch.object(debian, "DEV_PER_MILLE", 200), mock.patch.object(debian, "TEST_PER_MILLE", 200):
            prepared = debian.prepare_debian_corpus(self.tmp / "cache", write_lists(self.tmp / "lists", 40), False)
        config = load_config("tiny", ["data.source=debian_descriptions"])
        with mock.patch.object(debian, "prepare_debian_corpus", return_value=prepared):
            for split in ("train", "dev", "test"):
                self.assertTrue(sources.has_split(config.data, split))
                pairs, provenance = sources.load_pairs(config.data, split)
                self.assertEqual(len(pairs), prepared.metadata()["counts"][split])
                self.assertEqual(provenance["corpus"]["counts"], prepared.metadata()["counts"])
            reverse = load_config("tiny", ["data.source=debian_descriptions", "data.source_lang=de",
                                           "data.target_lang=en"])
            swapped, _ = sources.load_pairs(reverse.data, "train")
            files = sources.split_files(config.data, "dev")
        self.assertIn(("Werkzeug für Alpha", "tool for alpha"), swapped)
        self.assertEqual(files, ("text", [str(p) for p in ParallelCorpus(prepared.directory, "en", "de").files("dev")]))


if __name__ == "__main__":
    unittest.main()
