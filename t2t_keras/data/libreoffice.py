"""The default corpus: the LibreOffice help, English to another language (German by default).

The help is written in English and translated by people, paragraph by
paragraph, under the MPL-2.0. Debian and Ubuntu ship it as
``libreoffice-help-<lang>`` packages, so the corpus can be built on a fresh
machine from the distribution's own mirror, without other downloads:

1. ``apt-get download`` the English and the target-language package (no
   installation, no root) and unpack them with ``dpkg-deb -x``;
2. pair paragraphs that carry the same id in the same help page, and drop
   untranslated, empty and duplicate pairs (:func:`extract_pairs`);
3. split by whole help page, so that near-identical paragraphs of one page
   cannot land in both train and test, and drop dev/test pairs whose English
   also occurs in train (:func:`split_by_page`);
4. write ``{train,dev,test}.{en,<lang>}`` and ``SOURCE.json`` atomically to
   the cache directory, which later calls return at once.
"""

import collections
import hashlib
import logging
import pathlib
import re
import shutil
import subprocess
import tempfile
import typing

import tqdm

from t2t_keras.data import help_html
from t2t_keras.data.corpus import SPLITS, ParallelCorpus, corpora_dir, split_summary, write_corpus
from t2t_keras.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

SOURCE_LANG = "en"
SOURCE_PACKAGE = "libreoffice-help-en-us"
LICENSE = "MPL-2.0"
DEV_SIZE, TEST_SIZE, SEED = 1000, 1400, 0
ALTERNATIVES = (
    "Alternatives: set `data.source: text` and pass your own parallel files with "
    "`--source/--target`, or set `data.source: tfds` with e.g. `wmt14_translate/de-en`."
)
_LANG = re.compile(r"^[a-z]{2,3}(-[a-z]{2,4})?$", re.IGNORECASE)


class Pair(typing.NamedTuple):
    """One aligned paragraph: its help page, paragraph id, English text and translation."""

    page: str
    paragraph_id: str
    source: str
    target: str


def package_name(lang: str) -> str:
    """The Debian package holding the help in ``lang``, e.g. ``libreoffice-help-de``."""
    return f"libreoffice-help-{lang.lower()}"


def default_cache_dir(target_lang: str) -> pathlib.Path:
    """``$T2T_KERAS_CACHE`` (default ``~/.cache/t2t_keras``) ``/corpora/libreoffice-help-en-<lang>``."""
    return corpora_dir() / f"libreoffice-help-en-{target_lang}"


def prepare_libreoffice_corpus(target_lang="de", cache_dir=None, work_dir=None, progress=True):
    """Build (or reuse) the English-to-``target_lang`` LibreOffice help corpus.

    ``work_dir`` keeps the downloaded and unpacked packages (a temporary
    directory, removed afterwards, when None). Returns a :class:`ParallelCorpus`.
    """
    if not _LANG.match(target_lang) or target_lang.lower().startswith(SOURCE_LANG):
        raise ConfigError(f"target_lang {target_lang!r} is not a language code like 'de' or 'fr'.")
    cache = pathlib.Path(cache_dir or default_cache_dir(target_lang)).expanduser()
    corpus = ParallelCorpus(cache, SOURCE_LANG, target_lang)
    if corpus.reusable():
        return corpus
    if work_dir is not None:
        splits, metadata = _build(target_lang, pathlib.Path(work_dir), progress)
    else:
        with tempfile.TemporaryDirectory(prefix="libreoffice-help-") as tmp:
            splits, metadata = _build(target_lang, pathlib.Path(tmp), progress)
    write_corpus(corpus, splits, metadata)
    logger.info("Wrote the corpus to %s: %s", cache, metadata["counts"])
    return corpus


def _build(target_lang, work_dir, progress):
    """Fetch, align and split; return the splits and the ``SOURCE.json`` data."""
    work_dir.mkdir(parents=True, exist_ok=True)
    roots, packages = fetch_packages([SOURCE_PACKAGE, package_name(target_lang)], work_dir)
    stats = collections.Counter()
    pairs = extract_pairs(roots[0], roots[1], stats=stats, progress=progress)
    splits = split_by_page(pairs, dev_size=DEV_SIZE, test_size=TEST_SIZE, seed=SEED, stats=stats)
    metadata = {
        "corpus": "LibreOffice help, paragraphs paired by id within each help page",
        "source_lang": SOURCE_LANG,
        "target_lang": target_lang,
        "license": LICENSE,
        "packages": packages,
        "split": {
            "method": "by help page, pages ordered by sha256(f'{seed}:{path}'); "
            "dev/test pairs whose English occurs in train dropped",
            "seed": SEED,
            "dev_size": DEV_SIZE,
            "test_size": TEST_SIZE,
        },
        "pages": {split: len({p.page for p in splits[split]}) for split in SPLITS},
        **split_summary({split: splits[split] for split in SPLITS}, stats),
    }
    return splits, metadata


def fetch_packages(names, work_dir) -> tuple[list[pathlib.Path], list[dict]]:
    """Download and unpack the packages; return their unpacked roots and :func:`package_info`."""
    debs = download_packages(names, work_dir)
    roots = [unpack_package(deb, work_dir / name) for name, deb in zip(names, debs)]
    return roots, [package_info(deb) for deb in debs]


def _run(command, cwd=None) -> str:
    """Run ``command``; return stdout, or raise DataError naming the command and its error output."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DataError(f"`{' '.join(command)}` failed: {error}. {ALTERNATIVES}") from error
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise DataError(
            f"`{' '.join(command)}` failed (exit {done.returncode}):\n{tail}\n"
            "If apt has no package lists yet, run `apt-get update` first. " + ALTERNATIVES
        )
    return done.stdout


def download_packages(names, dest) -> list[pathlib.Path]:
    """``apt-get download`` the packages ``names`` into ``dest``; return the ``.deb`` paths."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise DataError(
                f"Cannot download the default corpus (LibreOffice help): `{tool}` is not "
                f"available; it needs a Debian or Ubuntu system. {ALTERNATIVES}"
            )
    dest = pathlib.Path(dest)
    logger.info("Downloading %s with apt-get", ", ".join(names))
    _run(["apt-get", "download", *names], cwd=dest)
    debs = []
    for name in names:
        found = sorted(dest.glob(f"{name}_*.deb"))
        if not found:
            raise DataError(f"`apt-get download {name}` left no .deb in {dest}. {ALTERNATIVES}")
        debs.append(found[-1])
    return debs


def unpack_package(deb, dest) -> pathlib.Path:
    """Unpack ``deb`` into ``dest`` with ``dpkg-deb -x`` (no installation); return ``dest``."""
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(dest)])
    return dest


def package_info(deb) -> dict:
    """Name, exact version, file name and sha256 of a ``.deb``, from its control data."""
    fields = _run(["dpkg-deb", "-f", str(deb), "Package", "Version"])
    info = dict(line.split(": ", 1) for line in fields.strip().splitlines())
    digest = hashlib.sha256(pathlib.Path(deb).read_bytes()).hexdigest()
    return {
        "package": info["Package"],
        "version": info["Version"],
        "file": pathlib.Path(deb).name,
        "sha256": digest,
    }


def extract_pairs(source_root, target_root, stats=None, progress=False) -> list[Pair]:
    """Pair the paragraphs of two unpacked help trees by page path and paragraph id.

    Each root is an unpacked package or its help language directory. Pairs
    with an empty side, untranslated pairs (target == source) and repeats of
    an earlier (source, target) pair are dropped; ``stats`` (a Counter), when
    given, counts them and the paragraphs or pages found in one language only.
    """
    stats = collections.Counter() if stats is None else stats
    roots = [help_html.find_help_root(root) for root in (source_root, target_root)]
    for given, root in zip((source_root, target_root), roots):
        if root is None:
            raise DataError(f"No LibreOffice help pages (text/**/*.html) found under {given}.")
    source_pages, target_pages = (set(help_html.list_pages(root)) for root in roots)
    stats["page_in_one_language_only"] += len(source_pages ^ target_pages)
    pairs, seen = [], set()
    pages = sorted(source_pages & target_pages)
    for page in tqdm.tqdm(pages, desc="help pages", unit="page", disable=not progress):
        for pair in _page_pairs(roots[0], roots[1], page, stats):
            if (pair.source, pair.target) in seen:
                stats["duplicate"] += 1
                continue
            seen.add((pair.source, pair.target))
            pairs.append(pair)
    logger.info("Aligned %d pairs from %d pages; dropped %s", len(pairs), len(pages), dict(stats))
    return pairs


def _page_pairs(source_root, target_root, page, stats) -> list[Pair]:
    """The translated pairs of one page, in source order."""
    source = help_html.page_paragraphs(source_root / page)
    target = help_html.page_paragraphs(target_root / page)
    stats["id_in_one_language_only"] += len(source.keys() ^ target.keys())
    pairs = []
    for key, text in source.items():
        if key not in target:
            continue
        if not text or not target[key]:
            stats["empty"] += 1
        elif text == target[key]:
            stats["untranslated"] += 1
        else:
            pairs.append(Pair(page, key[0], text, target[key]))
    return pairs


def split_by_page(pairs, dev_size=DEV_SIZE, test_size=TEST_SIZE, seed=SEED, stats=None) -> dict[str, list]:
    """Split ``pairs`` into train/dev/test by whole help page, deterministically.

    Pages are taken in the order of ``sha256(f"{seed}:{page}")`` and given to
    test, then dev, until each holds about its budget of pairs (counting only
    pairs whose English appears in no other page, since the rest may be
    dropped below); all remaining pages go to train. Dev and test pairs whose
    English also occurs in train are then dropped (counted in ``stats``).
    """
    by_page = collections.defaultdict(list)
    for pair in pairs:
        by_page[pair.page].append(pair)
    pages_of_source = collections.Counter(
        source for page_pairs in by_page.values() for source in {p.source for p in page_pairs}
    )
    budgets = {"test": test_size, "dev": dev_size}
    splits = {split: [] for split in SPLITS}
    for page in sorted(by_page, key=lambda page: _page_hash(page, seed)):
        split = next((s for s, budget in budgets.items() if budget > 0), "train")
        splits[split].extend(by_page[page])
        if split != "train":
            budgets[split] -= sum(pages_of_source[p.source] == 1 for p in by_page[page])
    return _drop_train_sources(splits, stats)


def _page_hash(page: str, seed) -> str:
    """A stable, platform-independent sort key for a page path."""
    return hashlib.sha256(f"{seed}:{page}".encode("utf-8")).hexdigest()


def _drop_train_sources(splits, stats) -> dict[str, list]:
    """Remove dev/test pairs whose English source also occurs in train."""
    stats = collections.Counter() if stats is None else stats
    train_sources = {pair.source for pair in splits["train"]}
    for split in ("dev", "test"):
        kept = [pair for pair in splits[split] if pair.source not in train_sources]
        stats[f"{split}_source_in_train"] += len(splits[split]) - len(kept)
        splits[split] = kept
    logger.info(
        "Split into %s pairs; dropped %d dev and %d test pairs whose English is in train",
        {split: len(splits[split]) for split in SPLITS},
        stats["dev_source_in_train"],
        stats["test_source_in_train"],
    )
    return splits
