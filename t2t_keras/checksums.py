"""sha256 records of the files t2t_keras writes, and their checks: a damaged file is named, never read.

A record is a small JSON file beside what it describes, written when the files are written:

    {"format": "t2t_keras checksums", "files": {"ckpt-8.index": {"size": 15231, "sha256": "9f2c..."}, ...}}

with names relative to the record's directory, so a moved or copied directory still checks. Records are kept for

    a checkpoint            RUN/checkpoints/ckpt-8.sha256.json (`record_checkpoint`), also RUN/best/, RUN/averaged/
    the run's tokenizer     RUN/checksums.json (`runs.RunDirectory.record_tokenizer`)
    an export               EXPORT/assets.extra/export.sha256.json: every file of the SavedModel (`export.integrity`)

and the prepared corpus keeps its shards' in its manifest (`data.shards.verify_shards`). A file without a record
(written by an earlier version) is read unchecked.
"""

import hashlib
import json
import os
import pathlib

from t2t_keras.errors import CorruptFileError
from t2t_keras.files import write_text_atomic

FORMAT = "t2t_keras checksums"
CHECKPOINT_RECORD_SUFFIX = ".sha256.json"  # ckpt-8 -> ckpt-8.sha256.json
_CHUNK = 1 << 20


def file_sha256(path) -> str:
    """sha256 of a file, read in 1 MiB chunks (checkpoints can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(path) -> dict:
    """`{"size", "sha256"}` of the file at `path`."""
    return {"size": pathlib.Path(path).stat().st_size, "sha256": file_sha256(path)}


def record_files(record_path, paths) -> dict:
    """Writes the record of the files `paths` to `record_path` (each named relative to the record's directory);
    returns its "files"."""
    record_path = pathlib.Path(record_path)
    files = {pathlib.Path(os.path.relpath(path, record_path.parent)).as_posix(): fingerprint(path) for path in paths}
    write_text_atomic(record_path, json.dumps({"format": FORMAT, "files": files}, indent=1, sort_keys=True) + "\n")
    return files


def read_record(record_path):
    """The "files" of the record at `record_path`, or None when there is none."""
    record_path = pathlib.Path(record_path)
    if not record_path.exists():
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CorruptFileError(f"{record_path} is not a record of checksums (it is damaged): delete it to read the "
                               "files it describes unchecked, or restore it from a copy.")
    return record["files"]


def verify_files(record_path, fix, names=None) -> bool:
    """Checks the files the record at `record_path` names (only `names` when given) against it.

    Returns False when there is no record (nothing to check), True when every file matches; a file whose size or
    sha256 differs is a `CorruptFileError` naming the file, both checksums and `fix` (what the user can do).
    """
    files = read_record(record_path)
    if files is None:
        return False
    directory = pathlib.Path(record_path).parent
    for name, expected in sorted(files.items()):
        if names is not None and name not in names:
            continue
        check_file(os.path.normpath(directory / name), expected, fix)
    return True


def check_file(path, expected, fix):
    """Raises `CorruptFileError` unless the file at `path` has the `expected` size and sha256 (`fingerprint`)."""
    path = pathlib.Path(path)
    fix = f" {fix}" if fix else ""
    if not path.exists():
        raise CorruptFileError(f"{path} is missing: it was written with sha256 {expected['sha256']} "
                               f"({expected['size']} bytes).{fix}")
    size = path.stat().st_size
    actual = file_sha256(path)
    if (size, actual) != (expected["size"], expected["sha256"]):
        raise CorruptFileError(
            f"{path} is damaged: its sha256 is {actual} ({size} bytes), and {expected['sha256']} "
            f"({expected['size']} bytes) was recorded when it was written.{fix}")


def checkpoint_files(prefix) -> list:
    """The files of the tf.train checkpoint `prefix` (`.../ckpt-8`): its index and data shards, by name."""
    prefix = pathlib.Path(prefix)
    return sorted(prefix.parent.glob(prefix.name + ".index")) + \
        sorted(prefix.parent.glob(prefix.name + ".data-?????-of-?????"))


def checkpoint_record_path(prefix) -> pathlib.Path:
    """Where the record of the checkpoint `prefix` lies: `ckpt-8` -> `ckpt-8.sha256.json`."""
    return pathlib.Path(str(prefix) + CHECKPOINT_RECORD_SUFFIX)


def record_checkpoint(prefix) -> dict:
    """Records the checksums of the checkpoint `prefix`'s files beside them; returns the record's "files"."""
    return record_files(checkpoint_record_path(prefix), checkpoint_files(prefix))


def verify_checkpoint(prefix, fix) -> bool:
    """`verify_files` of the checkpoint `prefix`: False when it has no record, True when it matches."""
    return verify_files(checkpoint_record_path(prefix), fix)
