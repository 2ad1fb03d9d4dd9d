"""Atomic file writes: readers see the old file or the new one, never half of one."""

import contextlib
import os
import pathlib
import shutil
import tempfile


def write_bytes_atomic(path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in the same directory and `os.replace`.

    The directory is created if needed; the temporary file is removed if
    anything fails, so an interrupted write leaves the previous file intact.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
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
def staged_directory(out_dir, overwrite=False):
    """Yields a temporary sibling of `out_dir` to fill; renames it to `out_dir` when the block succeeds.

    If the block raises, the temporary directory is removed and `out_dir` is
    untouched. An existing `out_dir` is an error unless `overwrite`, in which
    case it is moved aside, replaced, and then deleted.
    """
    out_dir = pathlib.Path(out_dir)
    check_can_write(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.incomplete-"))
    os.chmod(staging, 0o755)  # mkdtemp makes it private; exports are meant to be read by servers
    try:
        yield staging
        _move_into_place(staging, out_dir, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_can_write(out_dir, overwrite):
    """Raises FileExistsError when `out_dir` exists and may not be replaced."""
    if pathlib.Path(out_dir).exists() and not overwrite:
        raise FileExistsError(
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
