"""Loading, checking, swapping and unloading model versions: one state machine, whose states a client reads.

    manager = VersionManager(source, load)        # source: `version_source.VersionDirectory` or `SingleExport`
    task = asyncio.create_task(manager.run())     # polls the source; loads what it aspires to, beside the served one
    with manager.use() as version:                # the served version (`use(2)`: version 2 while it is loaded)
        version.artifact.generate(...)            # the request finishes on it, whatever is swapped in meanwhile

As TF Serving's `AspiredVersionsManager` does, which version should be loaded is the source's policy (see
`version_source`), and each version goes through TF Serving's states, listed at `GET /v1/models/NAME`:

    START      known, not yet loading
    LOADING    `load(export)` runs in the loader thread (it opens the export, verifies its checksums and
               translates one sentence): the served version keeps answering meanwhile, the request path never
               waits on a load
    AVAILABLE  loaded and checked: swapped in at once (one assignment on the event loop), so every request
               from then on uses it, and the version it replaced turns UNLOADING
    UNLOADING  takes no new requests; the requests that took it before the swap finish on it
    END        unloaded once its last request is answered: its export is let go, and memory returns to one
               model's size; or failed to load or check (`error_code`, `error_message`: the source skips it
               until its files change, and the served version keeps serving)

A version whose task differs from the served one's (an `lm` export in a translation model's directory) fails its
check: clients of one model name keep one API.
"""

import asyncio
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import time

from t2t_keras.errors import CorruptFileError, T2TError
from t2t_keras.serving.attention_api import AttentionModel

logger = logging.getLogger(__name__)

START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"


class VersionNotFound(T2TError):
    """A request names a version that is not loaded (answered with 404, as TF Serving does)."""


class ServedVersion:
    """One version: its state, what it serves while loaded, and how many requests use it.

    Attributes:
        number: the version number (an int; TF Serving's REST API writes it as a string).
        state: one of `START`, `LOADING`, `AVAILABLE`, `UNLOADING`, `END`.
        error: None, or `(error_code, error_message)` of a failed load or check.
        artifact: the opened export while loaded, else None.
        attention_model: its `attention_api.AttentionModel` while loaded, else None.
        in_flight: requests using it now (`VersionManager.use`).
    """

    def __init__(self, number):
        self.number = number
        self.state = START
        self.error = None
        self.artifact = None
        self.attention_model = None
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def status(self):
        """TF Serving's `model_version_status` entry of this version."""
        code, message = self.error or ("OK", "")
        return {"version": str(self.number), "state": self.state,
                "status": {"error_code": code, "error_message": message}}

    def served(self, artifact):
        self.artifact = artifact
        self.attention_model = AttentionModel(artifact.path)
        self.state = AVAILABLE

    def failed(self, error):
        self.error = (_error_code(error), str(error))
        self.state = END

    async def unload(self):
        """Waits until no request uses this version, then lets its export go."""
        self.state = UNLOADING
        await self._idle.wait()
        self.artifact = self.attention_model = None
        self.state = END

    @contextlib.contextmanager
    def using(self):
        """Counts a request as using this version while the block runs (an unload waits for it)."""
        self.in_flight += 1
        self._idle.clear()
        try:
            yield self
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()


class VersionManager:
    """The versions of one model, the one served (`current`), and the loop that loads what the source aspires to.

    Args:
        source: `version_source.VersionDirectory` or `SingleExport`: `aspired()` -> `Version` or None,
            `failed(number)`, `polls` and (when it polls) `poll_seconds`.
        load: `load(export) -> artifact`, run in the loader thread: opens the export and checks it (raises
            what is wrong).
        on_available: `on_available(version, seconds)`, called once a version is swapped in.
        on_failed: `on_failed(version, error)`, called once a version failed to load or check.
    """

    def __init__(self, source, load, on_available=None, on_failed=None):
        self.source = source
        self.load = load
        self.on_available = on_available or (lambda version, seconds: None)
        self.on_failed = on_failed or (lambda version, error: None)
        self.versions = {}  # number -> ServedVersion, also the unloaded and failed ones (END)
        self.current = None
        self._loader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="t2t-load")
        self._unloading = set()
        first = source.aspired() if not source.polls else None
        if first is not None:  # a single export is listed (START) from the first request on
            self.versions[first.number] = ServedVersion(first.number)
        self._first = first

    async def run(self):
        """Loads what the source aspires to; a source that polls is asked again every `poll_seconds`."""
        while True:
            wanted = await self._poll() if self.source.polls else self._first
            if wanted is not None and (self.current is None or wanted.number != self.current.number):
                await self._load(wanted)
            if not self.source.polls:
                return
            await asyncio.sleep(self.source.poll_seconds)

    async def _poll(self):
        """The source's aspired version (its files are walked off the event loop); None if it cannot be read."""
        try:
            return await asyncio.get_running_loop().run_in_executor(None, self.source.aspired)
        except OSError as error:  # e.g. a base path made unreadable: the served version keeps serving
            logger.error("Could not look for new versions (trying again in %g s): %s", self.source.poll_seconds,
                         error)
            return None

    async def stop(self):
        """Stops the unloads under way (the process lets every export go), then waits for a load in the loader
        thread to finish."""
        for task in list(self._unloading):
            task.cancel()
        await asyncio.gather(*self._unloading, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self._loader.shutdown)

    def use(self, number=None):
        """`find(number).using()`: the version, counted as used while the block runs."""
        return self.find(number).using()

    def find(self, number=None):
        """The served version, or version `number` (an int or its string) while it is AVAILABLE.

        Raises:
            VersionNotFound: no such version is loaded.
        """
        version = self.current if number is None else self.versions.get(_version_number(number))
        if version is None or version.state != AVAILABLE:
            served = "none" if self.current is None else self.current.number
            raise VersionNotFound(f"Servable not found for request: version {number} is not loaded (the served "
                                  f"version is {served}): GET /v1/models/NAME lists the versions and their states.")
        return version

    def statuses(self):
        """TF Serving's `model_version_status` list: every version known, the newest first."""
        return [self.versions[number].status() for number in sorted(self.versions, reverse=True)]

    async def _load(self, wanted):
        version = self.versions.get(wanted.number)
        if version is None or version.state == END:
            version = self.versions[wanted.number] = ServedVersion(wanted.number)
        version.state = LOADING
        start = time.monotonic()
        try:
            artifact = await asyncio.get_running_loop().run_in_executor(self._loader, self.load, wanted.export)
            self._check_task(artifact)
        except Exception as error:  # noqa: BLE001 -- the version is skipped; the served one keeps serving
            version.failed(error)
            self.source.failed(wanted.number)
            self.on_failed(version, error)
            return
        old, self.current = self.current, version
        version.served(artifact)
        self.on_available(version, time.monotonic() - start)
        if old is not None:
            task = asyncio.create_task(self._unload(old))
            self._unloading.add(task)
            task.add_done_callback(self._unloading.discard)

    def _check_task(self, artifact):
        served = self.current.artifact if self.current is not None else None
        if served is not None and artifact.task != served.task:
            raise T2TError(f"{artifact.path} is a {artifact.task} export, and this model serves {served.task}: a "
                           "new version must answer the same requests. Serve it under another model name.")

    async def _unload(self, version):
        await version.unload()
        await asyncio.get_running_loop().run_in_executor(self._loader, release_memory)
        logger.info("Unloaded version %d.", version.number)


def release_memory():
    """Frees what an unloaded export held, and gives it back to the system.

    Its objects hold reference cycles (TensorFlow's functions), so they are collected now rather than at some
    later collection. Then glibc's `malloc_trim` returns the freed heap: the weights were allocated in the loader
    thread's arena, which glibc otherwise keeps for the next load, and the server's memory would not return to
    one model's size (`bench/bench_model_versions.py`).
    """
    gc.collect()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _glibc():
    """The C library when it is glibc (it has `malloc_trim`), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 -- raises AttributeError where the C library lacks it (musl, macOS)
    except (OSError, AttributeError):
        return None
    return libc


def _version_number(number):
    try:
        return int(number)
    except (TypeError, ValueError):
        raise VersionNotFound(f"Servable not found for request: {number!r} is not a version number.") from None


def _error_code(error):
    """TF Serving's canonical error code of a failed load or check."""
    if isinstance(error, CorruptFileError):
        return "DATA_LOSS"
    if isinstance(error, (T2TError, FileNotFoundError)):
        return "FAILED_PRECONDITION"
    return "UNKNOWN"
