"""Atomic file writes: readers see the old file or the new one, never half of one.

A write that fails for lack of space (ENOSPC, or EDQUOT: the user's quota) leaves nothing of itself behind
and raises `DiskFullError` naming the path, the space it needs and the space free (`reporting_full_disk`).
"""

import contextlib
import errno
import os
import pathlib
import shutil
import tempfile

from t2t_keras.errors import DiskFullError, PathExistsError

FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def write_bytes_atomic(path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in the same directory and `os.replace`.

    The directory is created if needed; the temporary file is removed if
    anything fails, so an interrupted write leaves the previous file intact.
    A full disk is a `DiskFullError` (`reporting_full_disk`).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    kept = f"{path} is as it was." if os.path.exists(path) else "Nothing of it was kept."
    with reporting_full_disk(path, len(data), kept):
        os.makedirs(directory, exist_ok=True)
        fd, temp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
        try:
            os.chmod(temp_path, 0o644)  # mkstemp makes it private; the file replaces a readable one
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp_path, path)
        except BaseException:
            if os.path.exists(temp_path):
                os.remove(temp_path)
            raise


def write_text_atomic(path, text: str) -> None:
    """Writes `text` as UTF-8 to `path` atomically (see `write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


@contextlib.contextmanager
def staged_directory(out_dir, overwrite=False, needed=None, estimate=""):
    """Yields a temporary sibling of `out_dir` to fill; renames it to `out_dir` when the block succeeds.

    If the block raises, the temporary directory is removed and `out_dir` is
    untouched. An existing `out_dir` is an error unless `overwrite`, in which
    case it is moved aside, replaced, and then deleted. A full disk is a
    `DiskFullError` that names `needed`, the bytes the directory is expected to
    take (`estimate` says how they were estimated), or without it the bytes
    written when the disk filled.
    """
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.incomplete-"))
    os.chmod(staging, 0o755)  # mkdtemp makes it private; exports are meant to be read by servers
    kept = f"{out_dir} is as it was" if out_dir.exists() else f"Nothing of {out_dir} was kept"
    try:
        estimate = estimate if needed is not None else " (at least what was written when the disk filled)"
        with reporting_full_disk(out_dir, lambda: directory_bytes(staging) if needed is None else needed,
                                 f"{kept}; the partial copy was removed.", estimate):
            yield staging
        _move_into_place(staging, out_dir, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_can_write(out_dir, overwrite):
    """Raises `PathExistsError` (a FileExistsError) when `out_dir` exists and may not be replaced."""
    if pathlib.Path(out_dir).exists() and not overwrite:
        raise PathExistsError(
            f"{out_dir} already exists: choose another output directory, or pass overwrite=True "
            "(--overwrite) to replace it."
        )


def _move_into_place(staging, out_dir, overwrite):
    """Renames `staging` to `out_dir`; an existing directory is moved aside and removed afterwards."""
    check_can_write(out_dir, overwrite)
    old = None
    if out_dir.exists():
        old = pathlib.Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.replaced-"))
        os.replace(out_dir, old / out_dir.name)
    try:
        os.replace(staging, out_dir)
    except BaseException:
        if old is not None:
            os.replace(old / out_dir.name, out_dir)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def is_disk_full(error) -> bool:
    """Whether `error` says the disk (or the user's quota on it) is full: an OSError with ENOSPC or EDQUOT, or
    another library's error (TensorFlow's ResourceExhaustedError when a checkpoint is saved) carrying the
    system's text for them."""
    if isinstance(error, OSError) and error.errno in FULL_DISK_ERRNOS:
        return True
    return any(os.strerror(code) in str(error) for code in FULL_DISK_ERRNOS)


@contextlib.contextmanager
def reporting_full_disk(path, needed, kept, estimate=""):
    """Turns an error of the block that `is_disk_full` into a `DiskFullError` about writing `path`.

    `needed`: the bytes the write takes (or a function giving them, called once the disk is full); `kept`: what
    the user still has (a sentence); `estimate`: how `needed` was estimated, when it is not exact.
    """
    try:
        yield
    except DiskFullError:
        raise
    except Exception as error:
        if not is_disk_full(error):
            raise
        needed = needed() if callable(needed) else needed
        free = free_space(path)
        short = f"at least {format_size(needed - free)}" if needed > free else "some space"
        raise DiskFullError(
            f"The disk is full: {path} could not be written ({_reason(error)}). It needs about "
            f"{format_size(needed)}{estimate}, and {format_size(free)} is free there. {kept} Free {short} on that "
            "disk (or move the directory to one with more room) and run the command again.") from error


def _reason(error):
    """The system's words for the full disk of `error`: "No space left on device" or "Disk quota exceeded"."""
    codes = [code for code in FULL_DISK_ERRNOS if os.strerror(code) in str(error)]
    code = error.errno if isinstance(error, OSError) and error.errno in FULL_DISK_ERRNOS else codes[0]
    return os.strerror(code)


def free_space(path) -> int:
    """Bytes free on the file system that holds `path` (or its nearest existing parent)."""
    path = pathlib.Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def directory_bytes(directory) -> int:
    """The total size of the files under `directory` (0 when it does not exist)."""
    return sum(path.stat().st_size for path in pathlib.Path(directory).rglob("*") if path.is_file())


def format_size(size) -> str:
    """`size` bytes for a message: "812 bytes", "3.4 kB", "2.9 MB", "1.2 GB" (powers of 1000, as `df -H`)."""
    if size < 1000:
        return f"{size} bytes"
    for unit in ("kB", "MB", "GB", "TB"):
        size /= 1000
        if size < 1000 or unit == "TB":
            return f"{size:.1f} {unit}"
