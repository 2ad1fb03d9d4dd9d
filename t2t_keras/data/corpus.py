"""A prepared parallel corpus on disk: one sentence per line, one file per split and language."""

import dataclasses
import datetime
import json
import logging
import os
import pathlib
import shutil
import tempfile

from t2t_keras.errors import ConfigError, DataError

SPLITS = ("train", "dev", "test")
METADATA_FILE = "SOURCE.json"

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """A directory holding ``{split}.{lang}`` text files and a ``SOURCE.json``.

    Line ``i`` of ``train.en`` translates to line ``i`` of ``train.<target_lang>``.
    ``SOURCE.json`` records where the text came from, its licence and counts.
    """

    directory: pathlib.Path
    source_lang: str
    target_lang: str

    def __post_init__(self):
        object.__setattr__(self, "directory", pathlib.Path(self.directory))

    def files(self, split: str) -> tuple[pathlib.Path, pathlib.Path]:
        """``(source_path, target_path)`` of ``split`` ("train", "dev" or "test")."""
        if split not in SPLITS:
            raise ConfigError(f"Unknown split {split!r}: use one of {', '.join(SPLITS)}.")
        stem = self.directory / split
        return (
            stem.with_name(f"{split}.{self.source_lang}"),
            stem.with_name(f"{split}.{self.target_lang}"),
        )

    def metadata(self) -> dict:
        """The contents of ``SOURCE.json``."""
        path = self.directory / METADATA_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{path} is missing: the corpus directory is incomplete.") from None

    def is_complete(self) -> bool:
        """True when ``SOURCE.json`` and every split file exist."""
        paths = [path for split in SPLITS for path in self.files(split)]
        return (self.directory / METADATA_FILE).is_file() and all(p.is_file() for p in paths)

    def reusable(self) -> bool:
        """True when the corpus is already complete (a build is then skipped); False when its directory is missing
        or empty. A directory that holds something else is a DataError: a build never writes over it."""
        if self.is_complete():
            logger.info("Using the prepared corpus in %s", self.directory)
            return True
        if self.directory.exists() and any(self.directory.iterdir()):
            raise DataError(f"{self.directory} exists but holds no complete corpus (no {METADATA_FILE}): remove it.")
        return False


def split_summary(splits, stats) -> dict:
    """What every corpus's metadata says of its splits: the pairs of each, the pairs dropped and why, and when the
    corpus was made."""
    return {"counts": {split: len(pairs) for split, pairs in splits.items()}, "dropped": dict(sorted(stats.items())),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def corpora_dir() -> pathlib.Path:
    """``$T2T_KERAS_CACHE`` (default ``~/.cache/t2t_keras``) ``/corpora``: where prepared corpora live."""
    root = os.environ.get("T2T_KERAS_CACHE") or pathlib.Path.home() / ".cache" / "t2t_keras"
    return pathlib.Path(root).expanduser() / "corpora"


def write_corpus(corpus: ParallelCorpus, splits, metadata) -> None:
    """Write ``splits`` (split -> pairs with ``.source`` and ``.target``) and ``metadata`` as ``corpus``.

    Everything goes to a temporary sibling directory first, which is then
    renamed into place: an interrupted run leaves at most a hidden ``.tmp``
    directory, never a half-written corpus. If another process finished
    first, its corpus is kept.
    """
    final = corpus.directory
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp", dir=final.parent))
    try:
        staged = ParallelCorpus(tmp, corpus.source_lang, corpus.target_lang)
        for split in SPLITS:
            source_path, target_path = staged.files(split)
            _write_lines(source_path, [pair.source for pair in splits[split]])
            _write_lines(target_path, [pair.target for pair in splits[split]])
        text = json.dumps(metadata, indent=2, ensure_ascii=False) + "\n"
        (tmp / METADATA_FILE).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)
        try:
            os.replace(tmp, final)
        except OSError:
            if not corpus.is_complete():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_lines(path, lines) -> None:
    """Write one line per item, UTF-8, ``\\n`` endings."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(line + "\n" for line in lines)
