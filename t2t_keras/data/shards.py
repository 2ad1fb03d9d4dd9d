"""The shard files of a prepared corpus: token ids of sentence pairs, with their lengths beside them.

A shard ``shard-00000`` is two NumPy ``.npy`` files:

    shard-00000.ids.npy      1-D, uint16 when the vocabulary has at most 65,536 pieces, else int32: the
                             source pieces of pair 0, its target pieces, then pair 1's, ... (no BOS/EOS)
    shard-00000.lengths.npy  (pairs, 2) int32: the source and target piece counts of each pair

Why NumPy files rather than TFRecord: the reader (`prepared.py`) plans each
epoch's batches from the lengths alone and then gathers pairs by index, in
the planned order, from memory-mapped shards. That needs the lengths without
the ids (a separate small file) and random access to pair ``i`` (an offset
into a flat array); a TFRecord file offers neither without reading it
through. The ``.npy`` header is tiny and fixed, so the bytes depend only on the
ids, and the same pairs always give the same files. Each file is written
atomically (temporary file + rename, `files.write_bytes_atomic`), and its
size and sha256 go into the preparation's manifest (`write_shard`'s return),
which `verify_shards` checks them against before training reads a shard.
"""

import hashlib
import io
import os
import pathlib
from typing import NamedTuple, Sequence

import numpy as np

from t2t_keras.checksums import check_file
from t2t_keras.errors import DataError
from t2t_keras.files import write_bytes_atomic

IDS_SUFFIX = ".ids.npy"
LENGTHS_SUFFIX = ".lengths.npy"


def shard_name(index: int) -> str:
    """The name of shard ``index``: ``shard-00007``."""
    return f"shard-{index:05d}"


def ids_dtype(vocab_size: int):
    """The smallest dtype that holds every id of a ``vocab_size``-piece vocabulary (uint16 or int32)."""
    return np.uint16 if vocab_size <= 1 << 16 else np.int32


def write_shard(directory, name: str, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray], dtype) -> dict:
    """Writes the pairs ``(sources[i], targets[i])`` (1-D id arrays, no BOS/EOS) as shard ``name``; returns the
    ``{suffix: {"size", "sha256"}}`` of its files, for the manifest."""
    lengths = np.array([[len(s), len(t)] for s, t in zip(sources, targets)], np.int32).reshape(-1, 2)
    pieces = [side for pair in zip(sources, targets) for side in pair]
    ids = np.concatenate(pieces).astype(dtype) if pieces else np.zeros([0], dtype)
    directory, written = pathlib.Path(directory), {}
    for suffix, array in ((IDS_SUFFIX, ids), (LENGTHS_SUFFIX, lengths)):
        data = _npy_bytes(array)
        write_bytes_atomic(directory / (name + suffix), data)
        written[suffix] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return written


def verify_shards(directory, entries) -> None:
    """Checks the files of the manifest's shard `entries` against the checksums recorded when they were written
    (`CorruptFileError` naming a damaged file, both checksums and the fix); entries of an earlier version, without
    checksums, pass."""
    fix = (f"Move {directory} aside and prepare the corpus again (t2t-keras prepare, or train, with the same "
           "config): the same corpus, tokenizer and seed give the same shards, so a run trained on them goes on "
           "exactly.")
    for entry in entries:
        for suffix, expected in sorted(entry.get("files", {}).items()):
            check_file(pathlib.Path(directory) / (entry["name"] + suffix), expected, fix)


def shard_files(directory, name: str) -> list[pathlib.Path]:
    """The files of shard ``name``."""
    return [pathlib.Path(directory) / (name + suffix) for suffix in (IDS_SUFFIX, LENGTHS_SUFFIX)]


def read_lengths(directory, name: str) -> np.ndarray:
    """``(pairs, 2)`` int32 source and target piece counts of shard ``name``, without reading its ids."""
    return np.load(_existing(pathlib.Path(directory) / (name + LENGTHS_SUFFIX)))


class Shard(NamedTuple):
    """An opened shard: ``ids`` memory-mapped, ``starts[i]`` where pair ``i`` begins in it, its ``lengths``."""

    ids: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray


def open_shard(directory, name: str) -> Shard:
    """Shard ``name`` with its ids memory-mapped (read on demand, shared through the page cache)."""
    lengths = read_lengths(directory, name)
    ids = np.load(_existing(pathlib.Path(directory) / (name + IDS_SUFFIX)), mmap_mode="r")
    ends = np.cumsum(lengths.sum(axis=1, dtype=np.int64))
    if (ends[-1] if len(ends) else 0) != len(ids):
        raise DataError(f"Shard {name} in {directory} holds {len(ids)} ids but its lengths add up to "
                        f"{ends[-1] if len(ends) else 0}: the directory is damaged. Prepare the corpus again "
                        "(overwrite=True).")
    return Shard(ids, ends - lengths.sum(axis=1), lengths)


def memory_shard(sources: Sequence[np.ndarray], targets: Sequence[np.ndarray], dtype) -> Shard:
    """The pairs ``(sources[i], targets[i])`` as a `Shard` held in memory, laid out as `write_shard` writes one."""
    lengths = np.array([[len(s), len(t)] for s, t in zip(sources, targets)], np.int32).reshape(-1, 2)
    pieces = [side for pair in zip(sources, targets) for side in pair]
    ids = np.concatenate(pieces).astype(dtype) if pieces else np.zeros([0], dtype)
    ends = np.cumsum(lengths.sum(axis=1, dtype=np.int64))
    return Shard(ids, ends - lengths.sum(axis=1), lengths)


class ShardFile:
    """A shard on disk whose pairs are read on demand with `os.pread`, nothing mapped into memory.

    The training reader (`prepared.py`) uses it: pages of a memory-mapped shard stay in the process once
    touched, so over an epoch a reader of mapped shards would come to hold the whole corpus; read this way,
    what the process holds does not grow with what it has read (the page cache keeps recent shards warm for
    everyone, and gives them back under pressure).
    """

    def __init__(self, directory, name: str):
        path = _existing(pathlib.Path(directory) / (name + IDS_SUFFIX))
        self.lengths = read_lengths(directory, name)
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, _, self.dtype = read_header(handle)
            self.offset = handle.tell()
        ends = np.cumsum(self.lengths.sum(axis=1, dtype=np.int64))
        if (ends[-1] if len(ends) else 0) != shape[0]:
            raise DataError(f"Shard {name} in {directory} holds {shape[0]} ids but its lengths add up to "
                            f"{ends[-1] if len(ends) else 0}: the directory is damaged. Prepare the corpus again "
                            "(overwrite=True).")
        self.starts = ends - self.lengths.sum(axis=1)
        self.fd = os.open(path, os.O_RDONLY)

    def gather(self, rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source, target)``: ``(len(rows), width)`` int32 pieces of pairs ``rows``, right-padded with 0."""
        source, target = np.zeros([2, len(rows), width], np.int32)
        size = self.dtype.itemsize
        for index, row in enumerate(rows):
            source_length, target_length = self.lengths[row]
            data = os.pread(self.fd, int(source_length + target_length) * size,
                            self.offset + int(self.starts[row]) * size)
            ids = np.frombuffer(data, self.dtype)
            source[index, :source_length], target[index, :target_length] = ids[:source_length], ids[source_length:]
        return source, target

    def close(self):
        os.close(self.fd)


def held_gather(shard: Shard, rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """`ShardFile.gather` for a `Shard` held in memory."""
    return gather_padded(shard, rows, 0, width), gather_padded(shard, rows, 1, width)


def shard_pairs(shard: Shard) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every pair of ``shard`` as ``(source_ids, target_ids)`` int32 arrays, in shard order."""
    pairs = []
    for start, (source_length, target_length) in zip(shard.starts, shard.lengths):
        middle = start + source_length
        pairs.append((np.asarray(shard.ids[start:middle], np.int32),
                      np.asarray(shard.ids[middle:middle + target_length], np.int32)))
    return pairs


def gather_padded(shard: Shard, rows: np.ndarray, side: int, width: int) -> np.ndarray:
    """``(len(rows), width)`` int32: side ``side`` (0 source, 1 target) of pairs ``rows``, right-padded with 0."""
    lengths = shard.lengths[rows, side]
    starts = shard.starts[rows] + (shard.lengths[rows, 0] if side == 1 else 0)
    columns = np.arange(width)
    inside = columns[None, :] < lengths[:, None]
    positions = np.where(inside, starts[:, None] + columns[None, :], 0)
    return np.where(inside, np.asarray(shard.ids[positions.ravel()]).reshape(positions.shape), 0).astype(np.int32)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _existing(path: pathlib.Path) -> pathlib.Path:
    if not path.exists():
        raise DataError(f"{path} is missing: the prepared corpus is incomplete. Run the preparation again "
                        "(it resumes) or prepare into a new directory.")
    return path
