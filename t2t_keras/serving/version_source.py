"""Which versions of a model should be loaded: a policy over what a source sees on disk.

    source = VersionDirectory("models/base", poll_seconds=1)   # TF Serving's --model_base_path layout
    source.aspired()          # Version(2, "models/base/2"): the newest version ready to load, or None

TF Serving's layout: numbered version subdirectories of a base path, each an export (a SavedModel or a
CTranslate2 directory); other entries are ignored. The newest version is aspired, as TF Serving's default
version policy (`latest`, one version) does, once it is ready:

* **stable**: it holds files, and they (names, sizes, modification times) are the same at two polls in a
  row, so a directory still being copied is not opened half-written (its checksum record, checked when it
  loads, catches a copy that paused longer than a poll);
* **not failed as it is**: a version that failed to load or check is skipped until its files change
  (`failed`), so a damaged copy is logged once, not once a poll, and a repaired one is tried again.

A failed newest version leaves the newest one below it aspired: the server keeps what it serves. A version
removed from disk stops being aspired, so removing the newest rolls back to the one below it.

`SingleExport` is the source of `serve --saved-model DIR` (and of Python callers giving one export): that
export is version 1, aspired once.
"""

import os
import pathlib
import typing

from t2t_keras.errors import T2TError
from t2t_keras.switches import version_directories

DEFAULT_POLL_SECONDS = 1.0  # TF Serving's --file_system_poll_wait_seconds default
SINGLE_VERSION = 1  # the version number of a single export


class Version(typing.NamedTuple):
    """A version a source offers: its number and what opens it (a path, a callable or an opened export)."""

    number: int
    export: object


class SingleExport:
    """One export as version 1 (`export`: a path, a function that opens one, or an opened export)."""

    polls = False  # nothing new can appear: no poll loop

    def __init__(self, export):
        self.export = export
        self._failed = False

    def aspired(self):
        return None if self._failed else Version(SINGLE_VERSION, self.export)

    def failed(self, number):
        self._failed = True


class VersionDirectory:
    """The numbered version subdirectories of `base_path`, polled every `poll_seconds` (see the module docstring).

    Raises:
        T2TError: `poll_seconds` is not positive.
    """

    polls = True

    def __init__(self, base_path, poll_seconds=DEFAULT_POLL_SECONDS):
        if not poll_seconds > 0:
            raise T2TError(f"The file system poll wait must be > 0 seconds (TF Serving's default is 1). "
                           f"Received: poll_seconds={poll_seconds}")
        self.base_path = pathlib.Path(base_path)
        self.poll_seconds = poll_seconds
        self._seen = {}  # version number -> the fingerprint of its files at the last poll
        self._stable = set()  # versions whose files were unchanged between the last two polls
        self._failed = {}  # version number -> the fingerprint its files had when it failed

    def aspired(self):
        """Polls the base path once; returns the newest stable version not failed as it is, or None."""
        paths = version_directories(self.base_path)
        seen = {number: directory_state(path) for number, path in paths.items()}
        self._stable = {number for number, prints in seen.items() if self._seen.get(number) == prints}
        self._seen = seen
        self._failed = {number: prints for number, prints in self._failed.items() if seen.get(number) == prints}
        ready = [number for number in self._stable if number not in self._failed and seen[number]]  # not empty
        if not ready:
            return None
        newest = max(ready)
        return Version(newest, str(paths[newest]))

    def failed(self, number):
        """Skips version `number` until its files change."""
        self._failed[number] = self._seen.get(number)


def directory_state(directory):
    """The names, sizes and modification times of every file under `directory`: equal while nothing is written."""
    prints = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:  # removed while walking: the next poll sees the change
                continue
            prints.append((os.path.relpath(path, directory), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(prints))


def check_base_path(base_path):
    """Refuses a base path that is not a directory, before the server listens."""
    if not os.path.isdir(base_path):
        raise T2TError(f"{base_path} is not a directory: give the model base path, a directory whose numbered "
                       "subdirectories (1, 2, ...) are exports, as TF Serving's --model_base_path.")
