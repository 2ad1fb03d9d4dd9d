"""The model a server serves: its versions (loaded beside the served one, then swapped in), batched requests.

    model = ServedModel("exports/base", max_batch_size=32, max_wait_ms=10, max_queue=None)
    app = Starlette(..., lifespan=model.lifespan)   # model.lifecycle says "loading", then "ok"
    with model.versions.use() as version:           # the served version: version.artifact, version.attention_model
        await model.batcher.submit(lines, Pinned(version, request))

What `export` may be:

* an export path, or a callable without arguments that opens one (`t2t-keras serve` passes
  `artifacts.open_artifact` of its flags): version 1. The lifespan starts opening it and warming it up in the
  loader thread and returns at once, so the server listens meanwhile and answers "loading" (see `lifecycle`);
  an error while opening is kept in `lifecycle.load_error`, and `server.serve` raises it once it has stopped;
* an export already opened (what `artifacts.open_artifact` returns): version 1, warmed up before the server
  listens, so the server is ready when its port opens;
* a `version_source.VersionDirectory` (`serve --model-base-path DIR`): TF Serving's numbered versions. The
  newest is loaded and served; a newer one appearing is loaded beside it, checked and swapped in, and the old
  one is unloaded once its requests are answered (see `versions`). A version that fails to load or check is
  logged and skipped: the server keeps serving, or keeps "loading" until a version loads.

Every batch is pinned to the version its requests started on (`Pinned`): one batcher serves every version,
and a request in flight during a swap finishes on the old one. A run directory is refused: serve its export.
"""

import asyncio
import contextlib
import functools
import logging
import os
import typing

from t2t_keras.artifacts import open_artifact
from t2t_keras.config_paths import is_run_directory
from t2t_keras.errors import T2TError
from t2t_keras.serving.batcher import RequestBatcher
from t2t_keras.serving.lifecycle import Lifecycle
from t2t_keras.serving.metrics import ServingMetrics
from t2t_keras.serving.version_source import SingleExport, VersionDirectory
from t2t_keras.serving.versions import VersionManager
from t2t_keras.switches.kernels import kernels_differ

logger = logging.getLogger(__name__)

CHECK_SENTENCE = "warm-up"  # translated by every version before it serves


class Pinned(typing.NamedTuple):
    """A batch's parameters: the version it runs on and its decoding request (equal ones share a batch)."""

    version: object  # a `versions.ServedVersion`
    request: object  # what `version.artifact.generate` takes


class ServedModel:
    """The served versions (`versions`, a `VersionManager`), the `RequestBatcher` of their requests and the
    server's `Lifecycle`.

    Args:
        export: see the module docstring.
        max_batch_size, max_wait_ms, max_queue, max_queue_seconds, deadline_seconds: the `RequestBatcher`'s.
        warm_up: translate one sentence before serving a single export, so the first request does not pay for
            preparing the search. A version of a model base path always translates it: that is its check.
    """

    def __init__(self, export, max_batch_size=32, max_wait_ms=10, max_queue=None, warm_up=True,
                 max_queue_seconds=None, deadline_seconds=None):
        self.lifecycle = Lifecycle()
        self.metrics = ServingMetrics()  # read at GET /monitoring/prometheus/metrics
        self.batcher = RequestBatcher(_run_batch, max_batch_size, max_wait_ms, max_queue, max_queue_seconds,
                                      deadline_seconds, self.metrics)
        source = export if isinstance(export, VersionDirectory) else SingleExport(export)
        self.warm_up = warm_up or source.polls
        self.max_batch_size = max_batch_size
        self.versions = VersionManager(source, self._open_and_check, self._available, self._failed)
        self._preopened = not source.polls and _opener(export, max_batch_size) is None
        self._loading = None

    @property
    def artifact(self):
        """The served version's export (None until one is loaded)."""
        return None if self.versions.current is None else self.versions.current.artifact

    @property
    def attention_model(self):
        return None if self.versions.current is None else self.versions.current.attention_model

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        await self.batcher.start()
        self._loading = asyncio.create_task(self.versions.run())
        if self._preopened:  # nothing to open: ready when the server starts listening
            await self._loading
            if self.lifecycle.load_error is not None:
                raise self.lifecycle.load_error
        yield
        await self.stop()

    async def stop(self):
        """Stops polling and loading (a load already running in the loader thread finishes first), then the
        batcher."""
        if self._loading is not None:
            self._loading.cancel()
        await self.versions.stop()
        await self.batcher.stop()

    def _open_and_check(self, export):
        """Opens `export` and checks it, in the loader thread: a SavedModel verifies its checksum record as it opens,
        then one sentence is translated."""
        opener = _opener(export, self.max_batch_size)
        if isinstance(export, (str, os.PathLike)):
            check_servable_path(export)
            differ = kernels_differ(export)
            if differ is not None:
                logger.warning(differ)
        artifact = export if opener is None else opener()
        check_servable(artifact)
        if self.warm_up:
            generation = artifact.generate([CHECK_SENTENCE], artifact.defaults)
            if len(generation.texts) != 1:
                raise T2TError(f"{artifact.path} answered {len(generation.texts)} rows for one sentence: it is "
                               "not an export this server can serve.")
        return artifact

    def _available(self, version, seconds):
        self.lifecycle.loaded()
        metrics = getattr(self, "metrics", None)
        if metrics is not None:
            metrics.model_loaded(str(version.number), seconds)
        logger.info("Loaded %s as version %d in %.1f s: taking requests.", version.artifact.path, version.number,
                    seconds)

    def _failed(self, version, error):
        if not self.versions.source.polls:  # a single export: the server stops with its error
            logger.error("Loading the export failed: %s", error)
            self.lifecycle.load_error = error
            return
        served = self.versions.current
        logger.error("Version %d failed to load or check, and is skipped until its files change (%s): %s",
                     version.number, "still loading" if served is None else f"version {served.number} keeps serving",
                     error)


def _run_batch(sentences, pinned):
    """One batch, on the version its requests started on."""
    return pinned.version.artifact.generate(sentences, pinned.request)._asdict()


def check_servable(artifact):
    """Refuses a run directory: a server serves an export."""
    if artifact.kind == "run":
        check_servable_path(artifact.path)


def check_servable_path(path):
    """Refuses a missing path or a run directory before anything is opened or listens: a server serves an export."""
    if not os.path.exists(path):
        raise T2TError(f"{path} does not exist: give the directory or file `t2t-keras export --out` wrote.")
    if is_run_directory(path):
        raise T2TError(f"{path} is a run directory: serve its export (t2t-keras export --run-dir {path} --out DIR).")


def _opener(export, batch_size):
    """A function that opens `export`, or None when it is open already."""
    if isinstance(export, (str, os.PathLike)):
        return functools.partial(open_artifact, export, batch_size=batch_size)
    if callable(export) and not hasattr(export, "generate"):
        return export
    return None
