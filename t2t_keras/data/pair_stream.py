"""Sentence pairs of a corpus on disk, one at a time: two aligned text files or one TSV file.

`text_files.read_parallel_files` and `read_tsv` hold a whole split in lists;
a corpus of millions of pairs is read here as a stream instead, with the same
checks (alignment, one tab per TSV line, strict UTF-8, errors naming file and
line). Pairs with an empty side are yielded too, so the caller can count them.
"""

import itertools
from typing import Iterator, Sequence

from t2t_keras.data.text_files import iter_lines, split_tsv_line
from t2t_keras.errors import DataError

_MISSING = object()


def stream_pairs(kind: str, files: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Yields ``(source, target)`` stripped of surrounding whitespace, in file order, blanks included.

    Args:
      kind: "text" (``files`` is ``[source, target]``) or "tsv" (``files`` is ``[file]``).
      files: the corpus files.

    Raises:
      DataError: the files are not aligned, a TSV line has not exactly one tab,
        a file is empty, missing or not UTF-8.
    """
    if kind == "tsv":
        return _tsv_pairs(files[0])
    if kind == "text":
        return _parallel_pairs(*files)
    raise DataError(f"Cannot stream pairs from data.source={kind!r}: use text or tsv files.")


def _parallel_pairs(source_path, target_path) -> Iterator[tuple[str, str]]:
    count = 0
    for source, target in itertools.zip_longest(iter_lines(source_path), iter_lines(target_path),
                                                fillvalue=_MISSING):
        count += 1
        if source is _MISSING or target is _MISSING:
            shorter = source_path if source is _MISSING else target_path
            raise DataError(
                f"{shorter} ends after {count - 1} lines but the other file goes on: parallel files must be "
                "aligned line by line. Fix the files so that line i of one translates line i of the other."
            )
        yield source.strip(), target.strip()
    if count == 0:
        raise DataError(f"{source_path} is empty: expected one sentence per line.")


def _tsv_pairs(path) -> Iterator[tuple[str, str]]:
    number = 0
    for number, line in enumerate(iter_lines(path), start=1):
        source, target = split_tsv_line(path, number, line)
        yield source.strip(), target.strip()
    if number == 0:
        raise DataError(f"{path} is empty: expected one source<TAB>target pair per line.")
