"""A prepared parallel corpus on disk: one sentence per line, one file per split and language."""

import dataclasses
import json
import pathlib

from t2t_keras.errors import ConfigError, DataError

SPLITS = ("train", "dev", "test")
METADATA_FILE = "SOURCE.json"


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
