"""The export a server serves: opened in the model thread once the port is open, warmed up, then batched.

    model = ServedModel("exports/base", max_batch_size=32, max_wait_ms=10, max_queue=None)
    app = Starlette(..., lifespan=model.lifespan)   # model.lifecycle says "loading", then "ok"
    model.artifact, model.batcher, model.attention_model

What `export` may be:

* an export path, or a callable without arguments that opens one (`t2t-keras serve` passes
  `artifacts.open_artifact` of its flags): the lifespan starts opening it and warming it up in the model
  thread and returns at once, so the server listens meanwhile and answers "loading" (see `lifecycle`); an
  error while opening is kept in `lifecycle.load_error`, and `server.serve` raises it once it has stopped;
* an export already opened (what `artifacts.open_artifact` returns): it is warmed up before the server
  listens, so the server is ready when its port opens.

A run directory is refused: serve its export.
"""

import asyncio
import contextlib
import functools
import logging
import os

from t2t_keras.artifacts import open_artifact
from t2t_keras.errors import T2TError
from t2t_keras.runs import open_run
from t2t_keras.serving.attention_api import AttentionModel
from t2t_keras.serving.batcher import RequestBatcher
from t2t_keras.serving.lifecycle import Lifecycle

logger = logging.getLogger(__name__)


class ServedModel:
    """The served export, its `RequestBatcher` (which also runs the loading) and its `Lifecycle`.

    Args:
        export: see the module docstring.
        max_batch_size, max_wait_ms, max_queue: the `RequestBatcher`'s.
        warm_up: translate one sentence before taking requests, so the first
            request does not pay for preparing the search.
    """

    def __init__(self, export, max_batch_size=32, max_wait_ms=10, max_queue=None, warm_up=True):
        self.lifecycle = Lifecycle()
        self.batcher = RequestBatcher(self._run_batch, max_batch_size, max_wait_ms, max_queue)
        self.warm_up = warm_up
        self._open = _opener(export, max_batch_size)
        self.artifact = export if self._open is None else None
        self.attention_model = None
        self._loading = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        await self.batcher.start()
        self._loading = asyncio.create_task(self._load())
        if self._open is None:  # nothing to open: ready when the server starts listening
            await self._loading
            if self.lifecycle.load_error is not None:
                raise self.lifecycle.load_error
        yield
        await self.stop()

    async def stop(self):
        """Stops loading (a load already running in the model thread finishes first) and the batcher."""
        if self._loading is not None:
            self._loading.cancel()
        await self.batcher.stop()

    async def _load(self):
        try:
            if self._open is not None:
                self.artifact = await self.batcher.run_in_thread(self._open)
            check_servable(self.artifact)
            if self.warm_up:
                await self.batcher.run_in_thread(self.artifact.generate, ["warm-up"], self.artifact.defaults)
        except Exception as error:  # noqa: BLE001 -- kept, and raised by `serve` once the server has stopped
            logger.error("Loading the export failed: %s", error)
            self.lifecycle.load_error = error
            return
        self.attention_model = AttentionModel(self.artifact.path)
        self.lifecycle.loaded()
        logger.info("Loaded %s: taking requests.", self.artifact.path)

    def _run_batch(self, sentences, request):
        return self.artifact.generate(sentences, request)._asdict()


def check_servable(artifact):
    """Refuses a run directory: a server serves an export."""
    if artifact.kind == "run":
        check_servable_path(artifact.path)


def check_servable_path(path):
    """Refuses a missing path or a run directory before anything is opened or listens: a server serves an export."""
    if not os.path.exists(path):
        raise T2TError(f"{path} does not exist: give the directory or file `t2t-keras export --out` wrote.")
    if open_run(path).exists():
        raise T2TError(f"{path} is a run directory: serve its export (t2t-keras export --run-dir {path} --out DIR).")


def _opener(export, batch_size):
    """A function that opens `export`, or None when it is open already."""
    if isinstance(export, (str, os.PathLike)):
        return functools.partial(open_artifact, export, batch_size=batch_size)
    if callable(export) and not hasattr(export, "generate"):
        return export
    return None
