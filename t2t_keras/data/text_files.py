"""Parallel text on disk: two aligned files or one TSV file, read strictly; atomic writes.

Every problem is reported with the file and the 1-based line number. The only
pairs ever dropped are those with an empty side, and how many were dropped is
logged.
"""

import logging
from typing import Iterable, Iterator

from t2t_keras.errors import DataError, MissingPathError
from t2t_keras.files import write_bytes_atomic

logger = logging.getLogger(__name__)

_BOM = "\ufeff"


def read_parallel_files(source_path, target_path) -> list[tuple[str, str]]:
    """Reads two aligned files, one sentence per line, into ``(source, target)`` pairs.

    Args:
      source_path: file of source sentences.
      target_path: file of target sentences; line ``i`` translates line ``i``
        of ``source_path``.

    Returns:
      The pairs in file order, each side stripped of surrounding whitespace.
      Pairs with an empty side are dropped and counted in a warning.

    Raises:
      DataError: a file is empty or not UTF-8, or the line counts differ.
    """
    sources = _read_lines(source_path)
    targets = _read_lines(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"{source_path} has {len(sources)} lines but {target_path} has "
            f"{len(targets)}: parallel files must be aligned line by line. "
            "Fix the files so that line i of one translates line i of the other."
        )
    return _drop_blank_pairs(zip(sources, targets), f"{source_path} / {target_path}")


def read_tsv(path) -> list[tuple[str, str]]:
    """Reads ``source<TAB>target`` lines into ``(source, target)`` pairs.

    Returns:
      The pairs in file order, each side stripped of surrounding whitespace.
      Pairs with an empty side are dropped and counted in a warning.

    Raises:
      DataError: the file is empty or not UTF-8, or a line does not hold
        exactly one tab.
    """
    pairs = [split_tsv_line(path, number, line) for number, line in enumerate(_read_lines(path), start=1)]
    return _drop_blank_pairs(pairs, str(path))


def split_tsv_line(path, number, line):
    """`(source, target)` of line `number` of a TSV file, which must hold exactly one tab."""
    tabs = line.count("\t")
    if tabs != 1:
        raise DataError(
            f"{path}:{number} has {tabs} tab characters, expected exactly one "
            "(source<TAB>target). Fix or remove that line."
        )
    source, target = line.split("\t")
    return source, target


def write_lines(path, lines: Iterable[str]) -> None:
    """Writes one string per line (UTF-8, ``\\n`` endings) atomically.

    Readers see either the old file or the complete new one, never a partial
    write.

    Raises:
      DataError: a line contains a line break, which would shift every later
        line.
    """
    chunks = []
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            raise DataError(
                f"Line {number} written to {path} contains a line break: "
                "replace line breaks inside sentences before writing."
            )
        chunks.append(line + "\n")
    write_bytes_atomic(path, "".join(chunks).encode("utf-8"))


def decode_text(data: bytes, origin) -> list[str]:
    """Lines of UTF-8 `data` (e.g. stdin) without line endings; a bad byte is an error naming its line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded = []
    for number, raw in enumerate(lines, start=1):
        try:
            decoded.append(raw.decode("utf-8", errors="strict").rstrip("\r"))
        except UnicodeDecodeError as err:
            raise DataError(
                f"{origin}:{number} is not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}): "
                "re-encode the input as UTF-8."
            ) from None
    if decoded and decoded[0].startswith(_BOM):
        decoded[0] = decoded[0][len(_BOM):]
    return decoded


def read_user_file(path, fix) -> bytes:
    """The bytes of a file the user named; a `MissingPathError` naming it and `fix` when it is missing or a folder."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, IsADirectoryError):
        raise MissingPathError(f"{path} does not exist or is not a file: {fix}") from None


def iter_lines(path) -> Iterator[str]:
    """Yields the lines of ``path`` one at a time (no line endings, BOM removed), without holding the file.

    Raises:
      DataError: the file does not exist or a line is not UTF-8 (file and line named).
    """
    return _decode_lines(path)


def _read_lines(path) -> list[str]:
    """Lines of ``path`` without their line endings, decoded as strict UTF-8."""
    lines = list(_decode_lines(path))
    if not lines:
        raise DataError(f"{path} is empty: expected one sentence per line.")
    return lines


def _decode_lines(path) -> Iterator[str]:
    """Yields each line of ``path`` decoded on its own, so errors name the line."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path} does not exist: check the data path. A run whose corpus moved goes on from its new "
                        "place: --set data.train_files=[...] (and data.dev_files, data.test_files).") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8", errors="strict")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}:{number} is not valid UTF-8 (byte {raw[err.start]:#04x} "
                    f"at column {err.start + 1}): re-encode the file as UTF-8."
                ) from None
            if number == 1 and line.startswith(_BOM):
                line = line[len(_BOM):]
            yield line.rstrip("\r\n")


def _drop_blank_pairs(pairs: Iterable[tuple[str, str]], origin: str) -> list[tuple[str, str]]:
    """Strips both sides and drops pairs with an empty side, logging the count."""
    kept = []
    dropped = 0
    for source, target in pairs:
        source, target = source.strip(), target.strip()
        if source and target:
            kept.append((source, target))
        else:
            dropped += 1
    if dropped:
        logger.warning(
            "Dropped %d of %d pairs from %s whose source or target is blank.",
            dropped, dropped + len(kept), origin,
        )
    return kept
