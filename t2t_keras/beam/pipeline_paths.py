"""The files of a pipeline, settled before it starts: the inputs a glob names, the output file of each, the
dead-letter file; what is refused (a missing artifact, a glob matching nothing, an output that exists); the
artifact copied to a worker; files written whole through Beam's file systems.
"""

import os
import posixpath
import shutil
import tempfile
import threading
from typing import NamedTuple

from t2t_keras.errors import DataError, MissingPathError, PathExistsError

ERRORS_SUFFIX = ".errors.jsonl"


class Plan(NamedTuple):
    """What a pipeline reads and writes: `inputs[i]` goes to `outputs[i]`; the bad lines to `errors`."""

    inputs: tuple
    outputs: tuple
    errors: str
    directory: str  # the output directory of several inputs, "" for one


def plan_files(pattern, output, overwrite=False):
    """The `Plan` of `--input pattern --output output`: for one input, `output` is its file; for several, a
    directory holding one file per input under the input's base name.

    Raises:
      DataError: the pattern matches no file, or two inputs share a base name.
      PathExistsError: `output` (or its dead-letter file) exists and not `overwrite`.
    """
    from apache_beam.io.filesystems import FileSystems

    found = sorted(metadata.path for result in FileSystems.match([pattern]) for metadata in result.metadata_list)
    if not found:
        raise DataError(f"--input {pattern} matches no file: give an existing file, or a glob of files.")
    errors = output + ERRORS_SUFFIX
    if not overwrite:
        for path in (output, errors):
            if FileSystems.exists(path):
                raise PathExistsError(f"{path} exists: give another --output, or --overwrite to replace it.")
    if len(found) == 1:
        return Plan(tuple(found), (output,), errors, "")
    names = [posixpath.basename(path) for path in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise DataError(f"--input {pattern} matches several files named {', '.join(twice)}: their outputs would "
                        "share a name in --output; translate those directories one at a time.")
    return Plan(tuple(found), tuple(FileSystems.join(output, name) for name in names), errors, output)


def check_artifact(path):
    """Refuses an artifact path that does not exist (on any file system Beam has), before the pipeline starts."""
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(str(path)):
        raise MissingPathError(f"{path} does not exist: give the run directory or export to use (what "
                               "`t2t-keras train --run-dir` or `t2t-keras export --out` wrote).")


def clear_previous(plan):
    """Removes the dead-letter file of an earlier run (--overwrite) and makes the output directory of several
    inputs (kept when it exists)."""
    from apache_beam.io.filesystems import FileSystems

    if FileSystems.exists(plan.errors):
        FileSystems.delete([plan.errors])
    if plan.directory and not FileSystems.exists(plan.directory):
        FileSystems.mkdirs(plan.directory)


def remove_written(plan, overwrite):
    """Removes what a failed run of `plan` wrote: its dead-letter file and the temporary files of writes cut
    short; without `overwrite`, also its outputs and the output directory it made (none of them existed before
    it). An output kept with `overwrite` is whole: an earlier run's, or this run's."""
    from apache_beam.io.filesystems import FileSystems

    written = (plan.errors, *plan.outputs)
    directories = {posixpath.dirname(path) if "://" in path else os.path.dirname(path) or "." for path in written}
    patterns = [FileSystems.join(directory, ".*.part") for directory in sorted(directories)]
    parts = [m.path for result in FileSystems.match(patterns) for m in result.metadata_list]
    names = tuple(f".{posixpath.basename(path)}." for path in written)
    found = [path for path in written[:1 if overwrite else None] if FileSystems.exists(path)]
    found += [path for path in parts if posixpath.basename(path).startswith(names)]
    if found:
        FileSystems.delete(found)
    if plan.directory and not overwrite and FileSystems.exists(plan.directory):
        FileSystems.delete([plan.directory])


def write_whole(path, data: bytes):
    """Writes `data` to `path` through a temporary sibling renamed into place: a reader, or a retried bundle,
    never sees half of it."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    directory, name = posixpath.split(path) if "://" in path else os.path.split(path)
    temporary = FileSystems.join(directory or ".", f".{name}.{os.getpid()}.{threading.get_ident()}.part")
    with FileSystems.create(temporary, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])


_COPIES = {}
_COPYING = threading.Lock()


def local_copy(path):
    """`path` itself when it is local; else a copy of its files in a local temporary directory, made once per
    process."""
    from apache_beam.io.filesystems import FileSystems

    if FileSystems.get_scheme(path) in (None, "file"):
        return path
    with _COPYING:
        if path not in _COPIES:
            _COPIES[path] = _copy_down(path, FileSystems)
        return _COPIES[path]


def _copy_down(path, file_systems):
    target = tempfile.mkdtemp(prefix="t2t-artifact-")
    base = path.rstrip("/")
    files = [m.path for result in file_systems.match([base, base + "/**"]) for m in result.metadata_list]
    if files == [base]:  # one file (a LiteRT export)
        return _copy_file(base, os.path.join(target, posixpath.basename(base)), file_systems)
    for remote in files:
        _copy_file(remote, os.path.join(target, posixpath.relpath(remote, base)), file_systems)
    return target


def _copy_file(remote, local, file_systems):
    from apache_beam.io.filesystem import CompressionTypes

    os.makedirs(os.path.dirname(local), exist_ok=True)
    with file_systems.open(remote, compression_type=CompressionTypes.UNCOMPRESSED) as source, \
            open(local, "wb") as copy:
        shutil.copyfileobj(source, copy)
    return local
