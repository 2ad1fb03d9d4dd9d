"""One writer per run directory: an exclusive lock that the commands writing a run hold while they run.

    with RunLock(run.lock_path, run.lock_record_path, "train"):   # or run.lock("train") (runs.RunDirectory)
        ...                                                        # write the run

`train`, `prepare`, `average`, `distill` (the student's run), `export --average-last`, `shortlist` and `main`
take it; the commands that only read a run never do. The lock is `flock(LOCK_EX | LOCK_NB)` on RUN/.lock, held through a
file descriptor kept open while the command runs: the kernel frees it when the process ends, however it ends
(SIGKILL and power loss included). Beside it RUN/.lock.json records the holder (process id, host, command line,
start time), so that a refused command can say who writes the run.

    a second writer          finds the lock held and is refused at once (`RunBusyError`), naming the holder
    a holder that died       left its record behind with the lock free: the record is stale, a warning names the
                             dead process, and the lock is taken over
    the same process again   (distill trains the student it prepared) takes the lock it holds: the lock counts
    a normal end             removes the record, then the lock file, then releases the lock

On a disk shared by several machines (NFS) `flock` is carried to the file server by the client (Linux emulates
it with POSIX locks there), so a writer on one machine refuses one on another only where the server's lock
manager runs (NFSv4, or NFSv3 with lockd; not a mount with `nolock`). The recorded host lets a process on
another machine see who holds the run. A free lock whose record names another host cannot be checked: this
machine cannot tell whether that process still runs, so the command is refused with the record's path to
delete once the process is known to be gone.

The lock file is removed on release, and a process that acquired it checks that the path still names the file
it locked (else it locks the new one), so a removed lock file never lets two processes in.
"""

import datetime
import fcntl
import json
import logging
import os
import pathlib
import shlex
import socket
import sys

from t2t_keras.errors import RunBusyError
from t2t_keras.files import write_text_atomic

logger = logging.getLogger(__name__)

_HELD = {}  # resolved lock path -> _Held: the locks this process holds (one descriptor and a count each)


class _Held:
    def __init__(self, descriptor, created):
        self.descriptor, self.created, self.count = descriptor, created, 1


class RunLock:
    """The exclusive lock of one run directory, held inside a `with` block (see the module docstring).

    Args:
        lock_path: the lock file (RUN/.lock, `runs.RunDirectory.lock_path`).
        record_path: the holder's record beside it (RUN/.lock.json).
        command: what the holder does, for messages ("train", "export --average-last").
    """

    def __init__(self, lock_path, record_path, command):
        self.lock_path, self.record_path = pathlib.Path(lock_path), pathlib.Path(record_path)
        self.command = command
        self.run_dir = self.lock_path.parent

    def __enter__(self):
        key = os.path.realpath(self.lock_path)
        if key in _HELD:
            _HELD[key].count += 1
            return self
        created = _missing_directories(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        descriptor = None
        try:
            descriptor = self._acquire()
            self._take_over_stale()
            write_text_atomic(self.record_path, json.dumps(holder(self.command), indent=2) + "\n")
        except BaseException:
            if descriptor is not None:
                os.close(descriptor)
            _remove_empty(created)
            raise
        _HELD[os.path.realpath(self.lock_path)] = _Held(descriptor, created)
        return self

    def __exit__(self, *exc_info):
        key = os.path.realpath(self.lock_path)
        held = _HELD[key]
        held.count -= 1
        if held.count:
            return
        del _HELD[key]
        for path in (self.record_path, self.lock_path):  # the record first: a record without a lock means a death
            path.unlink(missing_ok=True)
        os.close(held.descriptor)  # releases the lock
        _remove_empty(held.created)

    def _acquire(self):
        """The descriptor of the locked lock file, or `RunBusyError` naming the live holder."""
        while True:
            descriptor = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                raise RunBusyError(self._busy_message(read_record(self.record_path))) from None
            except BaseException:
                os.close(descriptor)
                raise
            if _same_file(descriptor, self.lock_path):
                return descriptor
            os.close(descriptor)  # its holder removed the file we locked on its way out: lock the new one

    def _take_over_stale(self):
        """A record left with the lock free: its process died (this host) or cannot be checked (another host)."""
        record = read_record(self.record_path)
        if record is None:
            return
        if record.get("host") != socket.gethostname():
            raise RunBusyError(
                f"{self.run_dir} was being written by {describe(record)}, on another machine. Its lock is free "
                "from here, but this machine cannot tell whether that process still runs (a lock on a shared disk "
                "holds across machines only where the file server's lock manager works). If it has ended, delete "
                f"{self.record_path} and run the command again; if it still runs, wait for it or stop it there.")
        logger.warning("%s was being written by %s, which ended without releasing it (killed, or the machine "
                       "stopped): taking over its lock. What it was writing then was never named as done, and is "
                       "not read.", self.run_dir, describe(record))

    def _busy_message(self, record):
        if record is None:
            who, stop = "another process (it has not written its record yet)", "stop it"
        else:
            elsewhere = "" if record.get("host") == socket.gethostname() else f" on {record.get('host')}"
            who, stop = describe(record), f"stop it (kill {record.get('pid')}{elsewhere})"
        return (f"{self.run_dir} is being written by {who}. One process writes a run directory at a time, and "
                f"t2t-keras {self.command} writes it too. Wait for that process to finish, or {stop}, and run this "
                "command again (a stopped training resumes from its newest checkpoint).")


def holder(command):
    """The record of this process as the lock's holder: pid, host, command line, start time."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "command_line": command_line(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def command_line():
    """This process's command line as the system shows it (`/proc/self/cmdline`; `sys.argv` where there is none)."""
    try:
        words = pathlib.Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        return shlex.join(word.decode("utf-8", "replace") for word in words)
    except OSError:
        return shlex.join([sys.executable, *sys.argv])


def describe(record):
    """"process 1234 on host h (t2t-keras train, since 2024-05-01T10:00:00+00:00: python -m t2t_keras train ...)"."""
    return (f"process {record.get('pid')} on host {record.get('host')} (t2t-keras {record.get('command')}, since "
            f"{record.get('started')}: {record.get('command_line')})")


def read_record(path):
    """The holder's record at `path`, or None when there is none (or it is unreadable: a write cut short)."""
    try:
        record = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _same_file(descriptor, path):
    """Whether `path` still names the file open as `descriptor`."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (stat.st_dev, stat.st_ino) == (opened.st_dev, opened.st_ino)


def _missing_directories(directory):
    """`directory` and those of its parents that do not exist, deepest first: what taking the lock creates."""
    missing, path = [], pathlib.Path(os.path.abspath(directory))
    while not path.exists():
        missing.append(path)
        path = path.parent
    return missing


def _remove_empty(directories):
    """Removes the directories the lock created that are still empty, so a refused command leaves none."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:
            return
