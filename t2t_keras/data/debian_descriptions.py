"""A second domain: Debian package descriptions, English to German.

The Debian Description Translation Project (DDTP) translates the
descriptions of the packages in the archive; the archive publishes them per
language as ``dists/<suite>/<component>/i18n/Translation-<lang>`` indexes.
Each entry names a package, the ``Description-md5`` of its English
description and the description in one language, so the two indexes pair
exactly by that md5. The corpus is built from apt's own download, without
other network access and without touching the system's package lists:

1. ``apt-get update -o Acquire::Languages=en,de`` into a lists directory of
   the cache, and read the ``Translation-en`` and ``Translation-de`` indexes
   apt stored (``data/apt_translations.py``; root is not needed);
2. split each description into its short description and the long one's
   paragraphs (:func:`split_description`);
3. pair the short descriptions, and the long descriptions' paragraphs where
   both sides have the same number of them (:func:`pair_descriptions`);
4. split by package with a hash of its name, then drop repeated pairs and
   dev/test pairs whose English occurs in an earlier split
   (:func:`split_by_package`);
5. write ``{train,dev,test}.{en,de}`` and ``SOURCE.json`` to the cache, as
   the default corpus does (:func:`prepare_debian_corpus`).

Long descriptions follow Debian Policy 5.6.13: a line `` .`` separates
paragraphs, lines starting with one space are filled text and lines starting
with two spaces are shown verbatim (mostly lists, sometimes code). A
paragraph's lines are joined with single spaces; verbatim lines are joined
the same way rather than dropped (a list becomes ``Features: - a - b``), and
the pairs holding them are counted as kind ``verbatim``.
"""

import collections
import hashlib
import logging
import pathlib
import typing

from t2t_keras.data import apt_translations
from t2t_keras.data.corpus import SPLITS, ParallelCorpus, corpora_dir, split_summary, write_corpus

logger = logging.getLogger(__name__)

SOURCE_LANG, TARGET_LANG = "en", "de"
LANGUAGES = (SOURCE_LANG, TARGET_LANG)
DEV_PER_MILLE, TEST_PER_MILLE, SEED = 30, 30, 0  # packages per 1000 in dev and test, by name hash
CORPUS_NAME = "debian-descriptions-en-de"
LICENSE = "each description under its package's licence (Debian main: DFSG-free); translations by the DDTP"
KINDS = ("short", "paragraph", "verbatim")


class Pair(typing.NamedTuple):
    """One aligned segment: its package, kind (one of KINDS), English text and German text."""

    package: str
    kind: str
    source: str
    target: str


def default_cache_dir() -> pathlib.Path:
    """``$T2T_KERAS_CACHE`` (default ``~/.cache/t2t_keras``) ``/corpora/debian-descriptions-en-de``."""
    return corpora_dir() / CORPUS_NAME


def default_lists_dir() -> pathlib.Path:
    """The scratch apt lists directory, kept beside the corpus so a rebuild can reuse it."""
    return corpora_dir() / "apt-lists" / "debian-descriptions"


def prepare_debian_corpus(cache_dir=None, lists_dir=None, update=True) -> ParallelCorpus:
    """Build (or reuse) the English-German Debian descriptions corpus; return it.

    ``lists_dir`` is apt's scratch lists directory (:func:`default_lists_dir`
    when None). With ``update`` False, the indexes already there are used and
    apt is not run.
    """
    cache = pathlib.Path(cache_dir or default_cache_dir()).expanduser()
    corpus = ParallelCorpus(cache, SOURCE_LANG, TARGET_LANG)
    if corpus.reusable():
        return corpus
    lists = pathlib.Path(lists_dir or default_lists_dir()).expanduser()
    if update:
        apt_translations.update_lists(lists, LANGUAGES)
    splits, metadata = build_corpus(apt_translations.find_index_files(lists, LANGUAGES))
    write_corpus(corpus, splits, metadata)
    logger.info("Wrote the corpus to %s: %s", cache, metadata["counts"])
    return corpus


def split_description(description) -> tuple[str, list[list[str]]]:
    """``(short, paragraphs)``: each paragraph the list of its lines (verbatim ones start with a space)."""
    short, *lines = description.split("\n")
    paragraphs = [[]]
    for line in lines:
        if line.strip() == ".":
            paragraphs.append([])
        else:
            paragraphs[-1].append(line.rstrip())
    return short.strip(), [p for p in paragraphs if any(line.strip() for line in p)]


def paragraph_text(lines) -> str:
    """A paragraph's lines joined with single spaces (runs of whitespace collapsed)."""
    return " ".join(" ".join(lines).split())


def is_verbatim(lines) -> bool:
    """Whether a paragraph holds a verbatim line (two leading spaces in the index)."""
    return any(line.startswith((" ", "\t")) for line in lines)


def pair_descriptions(english, german, stats=None) -> list[Pair]:
    """Pair each German entry with the English description of its md5.

    ``english`` maps md5 to description; ``german`` is a list of entries.
    Gives the short descriptions, and the paragraphs in order where both
    sides have the same number of paragraphs. Pairs with an empty side and
    untranslated ones (target == source) are dropped; ``stats`` counts them.
    """
    stats = collections.Counter() if stats is None else stats
    pairs = []
    for entry in german:
        if entry.md5 not in english:
            stats["german_without_english"] += 1
            continue
        (source_short, source_paragraphs), (target_short, target_paragraphs) = (
            split_description(english[entry.md5]), split_description(entry.description))
        candidates = [("short", source_short, target_short)]
        if len(source_paragraphs) == len(target_paragraphs):
            for source, target in zip(source_paragraphs, target_paragraphs):
                kind = "verbatim" if is_verbatim(source) or is_verbatim(target) else "paragraph"
                candidates.append((kind, paragraph_text(source), paragraph_text(target)))
        else:
            stats["paragraph_count_differs"] += 1
        for kind, source, target in candidates:
            if not source or not target:
                stats["empty"] += 1
            elif source == target:
                stats["untranslated"] += 1
            else:
                pairs.append(Pair(entry.package, kind, source, target))
    return pairs


def package_split(package, seed=SEED, dev_per_mille=DEV_PER_MILLE, test_per_mille=TEST_PER_MILLE) -> str:
    """The split of ``package``: test, dev or train by ``sha256(f"{seed}:{package}")`` mod 1000."""
    bucket = int(hashlib.sha256(f"{seed}:{package}".encode("utf-8")).hexdigest()[:8], 16) % 1000
    if bucket < test_per_mille:
        return "test"
    return "dev" if bucket < test_per_mille + dev_per_mille else "train"


def split_by_package(pairs, seed=SEED, dev_per_mille=DEV_PER_MILLE, test_per_mille=TEST_PER_MILLE,
                     stats=None) -> dict[str, list[Pair]]:
    """Split ``pairs`` by package, then drop repeats and dev/test pairs whose English came earlier.

    Each package goes to one split (:func:`package_split`), whatever other
    packages do, so the split of a package stays put when the archive
    changes. Then, taking the splits in the order train, dev, test, a pair
    repeating an earlier pair of its split is dropped (packages sharing one
    description give the same pairs), and so is a dev or test pair whose
    English occurs in an earlier split: no dev or test source is in train,
    and none is in both dev and test. ``stats`` counts the drops.
    """
    stats = collections.Counter() if stats is None else stats
    splits = {split: [] for split in SPLITS}
    for pair in pairs:
        splits[package_split(pair.package, seed, dev_per_mille, test_per_mille)].append(pair)
    earlier_sources = set()
    for split in SPLITS:
        kept, seen = [], set()
        for pair in splits[split]:
            if (pair.source, pair.target) in seen:
                stats["duplicate"] += 1
            elif pair.source in earlier_sources:
                stats[f"{split}_source_in_earlier_split"] += 1
            else:
                seen.add((pair.source, pair.target))
                kept.append(pair)
        splits[split] = kept
        earlier_sources |= {pair.source for pair in kept}
    return splits


def build_corpus(index_files) -> tuple[dict[str, list[Pair]], dict]:
    """Pair and split the indexes ``apt_translations.find_index_files`` found; return the splits and metadata.

    English descriptions of every index are pooled by md5 (an md5 names one
    English text), so a German entry finds its English in any suite fetched.
    """
    english = {}
    for entry in _entries(index_files, SOURCE_LANG):
        english.setdefault(entry.md5, entry.description)
    german = _entries(index_files, TARGET_LANG)
    stats = collections.Counter()
    pairs = pair_descriptions(english, german, stats)
    splits = split_by_package(pairs, SEED, DEV_PER_MILLE, TEST_PER_MILLE, stats)
    descriptions = {"english": len(english), "german": len(german),
                    "paired": len(german) - stats["german_without_english"]}
    return splits, _metadata(index_files, splits, descriptions, stats)


def _entries(index_files, lang) -> list:
    """The stanzas of every index of ``lang``, in order."""
    return [entry for index_file in index_files[lang]
            for entry in apt_translations.parse_index(apt_translations.read_index(index_file.path), lang)]


def _metadata(index_files, splits, descriptions, stats) -> dict:
    """The ``SOURCE.json`` data: provenance, split method, counts and drops."""
    all_files = index_files[SOURCE_LANG] + index_files[TARGET_LANG]
    return {
        "corpus": "Debian package descriptions (DDTP): short descriptions and long-description paragraphs "
                  "paired by Description-md5",
        "source_lang": SOURCE_LANG,
        "target_lang": TARGET_LANG,
        "license": LICENSE,
        "releases": [apt_translations.release_info(f) for f in index_files[TARGET_LANG]],
        "index_files": [apt_translations.file_info(f) for f in all_files],
        "descriptions": descriptions,
        "split": {
            "method": "by package, sha256(f'{seed}:{package}') mod 1000 below test_per_mille: test, below "
                      "test_per_mille + dev_per_mille: dev, else train; then repeated pairs and dev/test pairs "
                      "whose English occurs in an earlier split (train, dev, test) dropped",
            "seed": SEED,
            "dev_per_mille": DEV_PER_MILLE,
            "test_per_mille": TEST_PER_MILLE,
        },
        "packages": {split: len({p.package for p in splits[split]}) for split in SPLITS},
        "kinds": {split: {kind: sum(p.kind == kind for p in splits[split]) for kind in KINDS} for split in SPLITS},
        **split_summary({split: splits[split] for split in SPLITS}, stats),
    }
