"""The LibreOffice help corpus: alignment, cleaning, page split, cache and errors.

Runs on tiny help trees written in the layout and HTML form of the
``libreoffice-help-*`` packages; nothing is downloaded.
"""

import collections
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock

import lxml.html

from t2t_keras.data import corpus as corpus_module
from t2t_keras.data import help_html, libreoffice
from t2t_keras.data.corpus import ParallelCorpus
from t2t_keras.data.libreoffice import Pair, extract_pairs, prepare_libreoffice_corpus, split_by_page
from t2t_keras.errors import ConfigError, DataError

HTML = """<!DOCTYPE html>
<html lang="{lang}" dir="ltr"><head>
<meta http-equiv="Content-Type" content="text/html; charset=utf-8"><title>Help</title>
<script type="text/javascript">var lang = "{lang}";</script></head>
<body><div id="DisplayArea">
<a name="bm_id1"></a>
{body}
</div></body></html>
"""


def switch(mac, default):
    """An inline platform switch as the help compiler writes it."""
    return (
        '<span id="swln_1" class="switchinline">'
        f'<span hidden="true" id="MACx_1" class="MAC"><span class="emph">{mac}</span></span>'
        f'<span hidden="true" id="defaultx_1"><span class="emph">{default}</span></span></span>'
    )


# page -> language -> [(tag, id, extra attributes, inner HTML)]
PAGES = {
    "text/shared/a.html": {
        "en": [
            ("h1", "hd_id1", "", "Load/Save options"),
            ("p", "par_id1", ' class="paragraph"',
             '<span class="avis">Specifies <span class="emph">general</span>\n   settings.</span>'),
            ("p", "par_id2", "", f"Choose {switch('LibreOffice - Preferences', 'Tools - Options')}"
             '<span class="emph"> - Load/Save</span>.'),
            ("p", "par_id3", "", "LibreOffice"),
            ("p", "par_id4", "", "Only in English."),
            ("p", "par_id5", ' class="code"', "SELECT field FROM table"),
            ("p", "par_id6", "", 'Press<br>the <a href="x.html">Enter</a>&nbsp;key.'),
        ],
        "de": [
            ("h1", "hd_id1", "", "Optionen Laden/Speichern"),
            ("p", "par_id1", ' class="paragraph"',
             '<span class="avis">Legt <span class="emph">allgemeine</span> Einstellungen fest.</span>'),
            ("p", "par_id2", "", f"Wählen Sie {switch('LibreOffice - Einstellungen', 'Extras - Optionen')}"
             '<span class="emph"> - Laden/Speichern</span>.'),
            ("p", "par_id3", "", "LibreOffice"),
            ("p", "par_id5", ' class="code"', "SELECT feld FROM tabelle"),
            ("p", "par_id6", "", 'Drücken Sie<br>die <a href="x.html">Eingabetaste</a>.'),
            ("p", "par_id7", "", "Nur auf Deutsch."),
        ],
    },
    "text/swriter/b.html": {
        "en": [
            ("h1", "hd_id1", "", "Tables"),
            ("p", "par_id1", "", "Specifies general settings."),
        ],
        "de": [
            ("h1", "hd_id1", "", "Tabellen"),
            ("p", "par_id1", "", "Legt allgemeine Einstellungen fest."),
        ],
    },
    "text/shared/only_english.html": {"en": [("p", "par_id1", "", "Lonely page.")]},
}
EXPECTED_PAIRS = [
    ("text/shared/a.html", "hd_id1", "Load/Save options", "Optionen Laden/Speichern"),
    ("text/shared/a.html", "par_id1", "Specifies general settings.", "Legt allgemeine Einstellungen fest."),
    ("text/shared/a.html", "par_id2", "Choose Tools - Options - Load/Save.",
     "Wählen Sie Extras - Optionen - Laden/Speichern."),
    ("text/shared/a.html", "par_id6", "Press the Enter key.", "Drücken Sie die Eingabetaste."),
    ("text/swriter/b.html", "hd_id1", "Tables", "Tabellen"),
]
HELP_DIRS = {"en": "en-US", "de": "de", "fr": "fr"}


def write_tree(root, lang, pages):
    """Write ``pages`` for ``lang`` as an unpacked ``libreoffice-help-<lang>`` package."""
    help_root = pathlib.Path(root) / "usr/share/libreoffice/help" / HELP_DIRS[lang]
    for page, languages in pages.items():
        if lang in languages:
            body = "\n".join(
                f'<{tag} id="{pid}"{attrs} dir="auto">{inner}</{tag}>'
                for tag, pid, attrs, inner in languages[lang]
            )
            (help_root / page).parent.mkdir(parents=True, exist_ok=True)
            (help_root / page).write_text(HTML.format(lang=lang, body=body), encoding="utf-8")
    return pathlib.Path(root)


def numbered_pages(count, per_page=3, target_lang="de"):
    """``count`` pages of ``per_page`` distinct sentences each, in English and ``target_lang``."""
    word = {"de": "Satz", "fr": "Phrase"}[target_lang]
    return {
        f"text/page{n:02d}.html": {
            "en": [("p", f"par_id{i}", "", f"Sentence {i} of page {n}.") for i in range(per_page)],
            target_lang: [("p", f"par_id{i}", "", f"{word} {i} der Seite {n}.") for i in range(per_page)],
        }
        for n in range(count)
    }


def make_pairs(pages=40, per_page=5, shared_source=False):
    """Synthetic pairs; with ``shared_source`` every page also holds "Common heading"."""
    pairs = []
    for n in range(pages):
        if shared_source:
            pairs.append(Pair(f"p{n}.html", "hd_id0", "Common heading", f"Überschrift {n}"))
        pairs += [Pair(f"p{n}.html", f"par_id{i}", f"S {n}.{i}", f"T {n}.{i}") for i in range(per_page)]
    return pairs


class TempDirTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)


class ExtractPairsTest(TempDirTestCase):
    def extract(self):
        stats = collections.Counter()
        pairs = extract_pairs(write_tree(self.tmp / "en", "en", PAGES),
                              write_tree(self.tmp / "de", "de", PAGES), stats=stats)
        return pairs, stats

    def test_pairs_by_id_within_the_same_page_with_markup_stripped(self):
        pairs, _ = self.extract()
        self.assertEqual([tuple(pair) for pair in pairs], EXPECTED_PAIRS)

    def test_untranslated_duplicate_and_one_sided_paragraphs_dropped_and_counted(self):
        pairs, stats = self.extract()
        self.assertNotIn("LibreOffice", [pair.source for pair in pairs])
        self.assertEqual(stats["untranslated"], 1)
        self.assertEqual(stats["duplicate"], 1)  # b.html repeats a.html's par_id1 pair
        self.assertEqual(stats["id_in_one_language_only"], 2)  # par_id4 (en), par_id7 (de)
        self.assertEqual(stats["page_in_one_language_only"], 1)

    def test_accepts_help_language_directories_as_roots(self):
        write_tree(self.tmp / "en", "en", PAGES)
        write_tree(self.tmp / "de", "de", PAGES)
        pairs = extract_pairs(self.tmp / "en/usr/share/libreoffice/help/en-US",
                              self.tmp / "de/usr/share/libreoffice/help/de")
        self.assertEqual(len(pairs), len(EXPECTED_PAIRS))

    def test_tree_without_help_pages_is_a_data_error(self):
        (self.tmp / "empty").mkdir()
        with self.assertRaisesRegex(DataError, "No LibreOffice help pages"):
            extract_pairs(self.tmp / "empty", write_tree(self.tmp / "de", "de", PAGES))

    def test_repeated_ids_in_a_page_pair_by_occurrence(self):
        page = {"text/r.html": {"en": [("p", "par_id1", "", "First."), ("p", "par_id1", "", "Second.")],
                                "de": [("p", "par_id1", "", "Erster."), ("p", "par_id1", "", "Zweiter.")]}}
        pairs = extract_pairs(write_tree(self.tmp / "en", "en", page), write_tree(self.tmp / "de", "de", page))
        self.assertEqual([(p.source, p.target) for p in pairs], [("First.", "Erster."), ("Second.", "Zweiter.")])

    def test_switch_without_default_keeps_first_alternative_and_stray_text(self):
        html = ('<p id="par_id1">Use <span class="switchinline"><span hidden="true" id="WINa">Alt</span>'
                '<span hidden="true" id="MACa">Option</span> key</p>')
        element = lxml.html.fragment_fromstring(html)
        self.assertEqual(help_html.element_text(element), "Use Alt key")


class SplitByPageTest(unittest.TestCase):
    def test_no_page_in_two_splits_and_budgets_roughly_met(self):
        splits = split_by_page(make_pairs(), dev_size=20, test_size=30)
        pages = {name: {pair.page for pair in pairs} for name, pairs in splits.items()}
        self.assertFalse(pages["train"] & pages["dev"] or pages["train"] & pages["test"]
                         or pages["dev"] & pages["test"])
        self.assertEqual(sum(len(p) for p in splits.values()), 200)
        self.assertTrue(20 <= len(splits["dev"]) < 25 and 30 <= len(splits["test"]) < 35)

    def test_deterministic_and_independent_of_input_page_order(self):
        pairs = make_pairs()
        reordered = sorted(pairs, key=lambda pair: (-int(pair.page[1:-5]), pair.paragraph_id))
        first, second = split_by_page(pairs, 20, 30), split_by_page(reordered, 20, 30)
        self.assertEqual(first, split_by_page(pairs, 20, 30))
        self.assertEqual({k: set(v) for k, v in first.items()}, {k: set(v) for k, v in second.items()})
        other_seed = split_by_page(pairs, 20, 30, seed=1)
        self.assertNotEqual({p.page for p in first["test"]}, {p.page for p in other_seed["test"]})

    def test_dev_and_test_sources_that_occur_in_train_are_dropped(self):
        stats = collections.Counter()
        splits = split_by_page(make_pairs(shared_source=True), dev_size=10, test_size=10, stats=stats)
        for name in ("dev", "test"):
            self.assertNotIn("Common heading", [pair.source for pair in splits[name]])
            self.assertEqual(stats[f"{name}_source_in_train"], len({p.page for p in splits[name]}))
        self.assertIn("Common heading", [pair.source for pair in splits["train"]])


class PrepareCorpusTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        for name, value in (("DEV_SIZE", 3), ("TEST_SIZE", 3)):
            patcher = mock.patch.object(libreoffice, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)

    def fake_fetch(self, target_lang="de"):
        """A stand-in for download + unpack: writes fake trees, returns fake package data."""
        pages = {**PAGES, **numbered_pages(12, target_lang=target_lang)}
        if target_lang != "de":
            pages = numbered_pages(12, target_lang=target_lang)

        def fetch(names, work_dir):
            roots = [write_tree(work_dir / name, lang, pages) for name, lang in zip(names, ("en", target_lang))]
            return roots, [{"package": name, "version": "4:7.4.7-1"} for name in names]

        return mock.patch.object(libreoffice, "fetch_packages", side_effect=fetch)

    def test_writes_cache_files_and_source_json(self):
        with self.fake_fetch() as fetch:
            corpus = prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", progress=False)
        fetch.assert_called_once()
        self.assertEqual(fetch.call_args.args[0], ["libreoffice-help-en-us", "libreoffice-help-de"])
        self.assertEqual(sorted(p.name for p in corpus.directory.iterdir()),
                         ["SOURCE.json", "dev.de", "dev.en", "test.de", "test.en", "train.de", "train.en"])
        meta = corpus.metadata()
        self.assertEqual(meta["license"], "MPL-2.0")
        self.assertEqual([p["version"] for p in meta["packages"]], ["4:7.4.7-1"] * 2)
        self.assertEqual(meta["dropped"]["untranslated"], 1)
        self.assertEqual(meta["dropped"]["duplicate"], 1)
        for split in ("train", "dev", "test"):
            source, target = (path.read_text(encoding="utf-8").splitlines() for path in corpus.files(split))
            self.assertEqual(len(source), meta["counts"][split])
            self.assertEqual(len(target), len(source))
            self.assertGreater(len(source), 0)
        self.assertEqual(sum(meta["counts"].values()), len(EXPECTED_PAIRS) + 36)
        self.assertEqual(json.loads((corpus.directory / "SOURCE.json").read_text("utf-8")), meta)

    def test_second_call_uses_the_cache_without_downloading(self):
        with self.fake_fetch():
            first = prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", progress=False)
        with mock.patch.object(libreoffice, "fetch_packages") as fetch:
            second = prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", progress=False)
        fetch.assert_not_called()
        self.assertEqual(second, first)

    def test_interrupted_write_leaves_no_cache_and_no_temp_dir(self):
        with self.fake_fetch(), mock.patch.object(corpus_module, "_write_lines", side_effect=[None, KeyboardInterrupt]):
            with self.assertRaises(KeyboardInterrupt):
                prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", progress=False)
        self.assertEqual(list(self.tmp.iterdir()), [])
        with self.fake_fetch() as fetch:
            prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", progress=False)
        fetch.assert_called_once()

    def test_target_language_is_a_parameter(self):
        with self.fake_fetch("fr") as fetch:
            corpus = prepare_libreoffice_corpus("fr", cache_dir=self.tmp / "fr", progress=False)
        self.assertEqual(fetch.call_args.args[0], ["libreoffice-help-en-us", "libreoffice-help-fr"])
        self.assertEqual(corpus.files("test")[1].name, "test.fr")
        self.assertEqual(corpus.metadata()["target_lang"], "fr")
        self.assertIn("Phrase", corpus.files("train")[1].read_text(encoding="utf-8"))

    def test_default_cache_dir_honours_environment(self):
        with mock.patch.dict(os.environ, {"T2T_KERAS_CACHE": str(self.tmp)}):
            path = libreoffice.default_cache_dir("fr")
        self.assertEqual(path, self.tmp / "corpora" / "libreoffice-help-en-fr")

    def test_foreign_non_empty_cache_dir_is_refused(self):
        (self.tmp / "cache").mkdir()
        (self.tmp / "cache" / "notes.txt").write_text("mine")
        with self.fake_fetch() as fetch, self.assertRaisesRegex(DataError, "no complete corpus"):
            prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", progress=False)
        fetch.assert_not_called()

    def test_bad_language_and_split_names(self):
        with self.assertRaises(ConfigError):
            prepare_libreoffice_corpus("../x", cache_dir=self.tmp, progress=False)
        with self.assertRaises(ConfigError):
            ParallelCorpus(self.tmp, "en", "de").files("validation")


class DownloadErrorTest(TempDirTestCase):
    def assert_points_to_alternatives(self, message):
        for hint in ("data.source: text", "--source/--target", "data.source: tfds", "wmt14_translate/de-en"):
            self.assertIn(hint, message)

    def test_missing_apt_get(self):
        with mock.patch.object(libreoffice.shutil, "which", return_value=None):
            with self.assertRaises(DataError) as caught:
                prepare_libreoffice_corpus(cache_dir=self.tmp / "cache", work_dir=self.tmp / "w", progress=False)
        self.assertIn("`apt-get` is not available", str(caught.exception))
        self.assert_points_to_alternatives(str(caught.exception))
        self.assertFalse((self.tmp / "cache").exists())

    def test_failed_download(self):
        failed = subprocess.CompletedProcess([], 100, "", "E: Unable to locate package libreoffice-help-xx")
        with mock.patch.object(libreoffice.shutil, "which", return_value="/usr/bin/apt-get"), \
                mock.patch.object(libreoffice.subprocess, "run", return_value=failed):
            with self.assertRaises(DataError) as caught:
                libreoffice.download_packages(["libreoffice-help-xx"], self.tmp)
        self.assertIn("Unable to locate package libreoffice-help-xx", str(caught.exception))
        self.assertIn("apt-get update", str(caught.exception))
        self.assert_points_to_alternatives(str(caught.exception))


if __name__ == "__main__":
    unittest.main()
