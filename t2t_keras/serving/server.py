"""An HTTP server speaking TensorFlow Serving's REST API (Starlette on uvicorn), for every kind of export.

    serve("exports/base", port=8501)        # blocks; SIGTERM or Ctrl+C drains it, then it stops

It serves what `artifacts.open_artifact` opens of an export: a translation SavedModel, a
CTranslate2 model (the same API), a LiteRT file, or an lm's continuation SavedModel, whose
`:predict` takes prompts and `"params": {"max_extra_length": 30, "temperature":
0.8, "top_k": 20, "seed": 1}` and answers `continuations` and `scores`.

Endpoints (NAME is `model_name`, "default" unless set, as in TF Serving; the
served version is 1):

* `POST /v1/models/NAME:predict` (also `/v1/models/NAME/versions/1:predict`):
  translation; request and answer formats in `rest_api`. Decoding parameters
  per request: `"params": {"beam_size": 2, "alpha": 0.6,
  "max_extra_length": 50, "num_return": 2}`, or as named columnar inputs.
* `GET /v1/models/NAME`: version status, as TF Serving reports it.
* `GET /v1/models/NAME/metadata`: the SavedModel's signatures, decoding
  defaults and request limits.
* `POST /v1/models/NAME:attention`: attention weights of sentences and their
  translations (format in `attention_api`).
* `GET /`: a page to try the model in a browser (see `live_page`), and
  `GET /attention?inputs=...&targets=...`: `inspect`'s HTML view of one
  sentence pair (every attention kind, layer and head).
* `GET /healthz`: 200 `{"status": "ok"}` while the server takes requests;
  503 `{"status": "loading"}` or `{"status": "draining"}` otherwise.
* `GET /statz`: the status, batching counters (requests, batches,
  batched_requests, ..., rejected_requests: refused because the queue was
  full) and the requests refused while loading or draining.

Concurrent requests with equal decoding parameters are translated together
(see `batcher.RequestBatcher`: at most `max_batch_size` sentences, waiting at
most `max_wait_ms` for company). Bad requests get HTTP 400 and `{"error":
...}`; the server keeps serving. Past `max_queue` sentences held (waiting or
being translated), a request gets HTTP 503 at once, with `Retry-After`
(seconds) and `{"error": ...}`.

The server listens before the export is loaded (see `served_model`), and a
SIGTERM or SIGINT drains it before it stops (see `lifecycle`): meanwhile the
requests that need the model get 503 with `Retry-After`.
"""

import logging

import tensorflow as tf
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.routing import Route

from t2t_keras.decoding.request import Generation
from t2t_keras.errors import T2TError
from t2t_keras.inspect.html_view import render_html
from t2t_keras.serving import attention_api, rest_api
from t2t_keras.serving.batcher import Overloaded, ShuttingDown
from t2t_keras.serving.lifecycle import DRAINING, MODEL_STATES, REFUSAL_RETRY_SECONDS, SERVING, DrainingServer
from t2t_keras.serving.live_page import page_routes
from t2t_keras.serving.served_model import ServedModel

logger = logging.getLogger(__name__)

MODEL_VERSION = "1"
UNAVAILABLE = (Overloaded, ShuttingDown)  # answered with 503 by `_Handlers._taken`, not as failures
DEFAULT_MODEL_NAME = "default"  # TF Serving's default --model_name


def serve(export, host="127.0.0.1", port=8501, model_name=DEFAULT_MODEL_NAME, max_batch_size=32,
          max_wait_ms=10, log_level="info", max_queue=None, drain_seconds=None, **limits):
    """Serves the export until SIGTERM or SIGINT, then drains and returns.

    `export`: an export directory or a function that opens one (both loaded
    after the port opens), or an opened export (see `served_model`). See the
    module docstring. `max_queue`: most sentences held at once (None: four
    batches, see `batcher`); `drain_seconds`: how long accepted requests may
    take after the signal (None: `lifecycle.DEFAULT_DRAIN_SECONDS`).
    `limits` are `rest_api.Limits` fields: `max_request_bytes`,
    `max_instances`, `max_sentence_chars`. Port 0 picks a free port (logged).

    Raises:
        the error that stopped the export from loading (the server stops then).
    """
    app = create_app(export, model_name, max_batch_size, max_wait_ms, max_queue=max_queue, **limits)
    model = app.state.model
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level)
    DrainingServer(config, model.lifecycle, model.stop, drain_seconds).run()
    if model.lifecycle.load_error is not None:
        raise model.lifecycle.load_error


def create_app(export, model_name=DEFAULT_MODEL_NAME, max_batch_size=32, max_wait_ms=10, warm_up=True,
               max_queue=None, **limits):
    """The Starlette application serving `export` (see `served_model.ServedModel`, which takes the other arguments).

    The export loads and the batcher starts and stops with the application (its
    lifespan). `app.state.model` holds the `ServedModel`, `app.state.batcher`
    its batcher.
    """
    model = ServedModel(export, max_batch_size, max_wait_ms, max_queue, warm_up)
    handlers = _Handlers(model, model_name, rest_api.Limits(**limits))
    routes = [
        Route("/healthz", handlers.health, methods=["GET"]),
        Route("/statz", handlers.stats, methods=["GET"]),
        Route("/v1/models/{name}", handlers.status, methods=["GET"]),
        Route("/v1/models/{name}/metadata", handlers.metadata, methods=["GET"]),
        Route("/v1/models/{name}:predict", handlers.predict, methods=["POST"]),
        Route("/v1/models/{name}/versions/{version}:predict", handlers.predict, methods=["POST"]),
        Route("/v1/models/{name}:attention", handlers.attention, methods=["POST"]),
        Route("/v1/models/{name}/versions/{version}:attention", handlers.attention, methods=["POST"]),
        Route("/attention", handlers.attention_page, methods=["GET"]),
        *page_routes(),
    ]
    app = Starlette(routes=routes, lifespan=model.lifespan, exception_handlers={HTTPException: _http_error})
    app.state.model = model
    app.state.batcher = model.batcher
    return app


class _Handlers:
    """The endpoints, sharing the served model and the limits.

    The endpoints that need the model answer through `_taken`: 503 while the
    server loads or drains, else counted as accepted until answered.
    """

    def __init__(self, model, model_name, limits):
        self.model = model
        self.lifecycle = model.lifecycle
        self.batcher = model.batcher
        self.model_name = model_name
        self.limits = limits

    @property
    def artifact(self):
        return self.model.artifact

    async def health(self, request):
        if self.lifecycle.status != SERVING:
            return JSONResponse({"status": self.lifecycle.status}, status_code=503)
        if not self.batcher.running:
            return _error("The server is not running its translation worker.", 503)
        return JSONResponse({"status": "ok"})

    async def stats(self, request):
        return JSONResponse({"model_name": self.model_name, "status": self.lifecycle.status,
                             "batching": self.batcher.stats(), "requests": self.lifecycle.stats()})

    async def status(self, request):
        self._check_model(request)
        working = self.lifecycle.status != SERVING or self.batcher.running
        state = MODEL_STATES[self.lifecycle.status] if working else "UNAVAILABLE"
        return JSONResponse({"model_version_status": [
            {"version": MODEL_VERSION, "state": state, "status": {"error_code": "OK", "error_message": ""}}]})

    async def metadata(self, request):
        self._check_model(request)
        return await self._taken(self._metadata, request)

    async def predict(self, request):
        self._check_model(request)
        return await self._taken(self._predict, request)

    async def attention(self, request):
        self._check_model(request)
        return await self._taken(self._attention, request)

    async def attention_page(self, request):
        """`GET /attention?inputs=...&targets=...`: `inspect`'s interactive page of one sentence pair."""
        return await self._taken(self._attention_page, request)

    async def _taken(self, answer, request):
        """`answer(request)` if the server takes requests now, else 503; 503 too when the queue is full."""
        refusal = self.lifecycle.refusal()
        if refusal is not None:
            return _unavailable(refusal, REFUSAL_RETRY_SECONDS, close=self.lifecycle.status == DRAINING)
        with self.lifecycle.accepted():
            try:
                return await answer(request)
            except Overloaded as error:
                return _unavailable(str(error), error.retry_after)
            except ShuttingDown as error:
                return _unavailable(str(error), REFUSAL_RETRY_SECONDS, close=True)

    async def _metadata(self, request):
        return JSONResponse({
            "model_spec": {"name": self.model_name, "signature_name": "", "version": MODEL_VERSION},
            "metadata": {
                "signature_def": {"signature_def": self.artifact.signature_defs()},
                "decoding": {"defaults": rest_api.defaults(self.artifact), **self.artifact.limits()},
                "limits": vars(self.limits),
            },
        })

    async def _predict(self, request):
        try:
            parsed = rest_api.parse_predict_request(await self._body(request), self.limits,
                                                    rest_api.parameter_names(self.artifact),
                                                    self.artifact.signature_names)
            generation_request = self.artifact.request(**parsed.params, constraints=parsed.constraints)
            if parsed.constraints is not None:  # a batch of its own: its lines carry their terms
                with self.batcher.holding(len(parsed.sentences)):
                    result = await self.batcher.run_in_thread(self.artifact.generate, parsed.sentences,
                                                              generation_request)
            else:
                result = Generation(**await self.batcher.submit(parsed.sentences, generation_request))
        except (T2TError, tf.errors.InvalidArgumentError) as error:
            return _error(str(error), 400)
        except UNAVAILABLE:
            raise
        except Exception as error:  # noqa: BLE001 -- the server answers and keeps serving
            logger.exception("Translation failed.")
            return _error(f"Translation failed: {error}", 500)
        outputs = rest_api.predict_outputs(result, generation_request, self.artifact.task)
        return JSONResponse(rest_api.format_predict_response(outputs, parsed.columnar))

    async def _attention(self, request):
        try:
            parsed = attention_api.parse_attention_request(await self._body(request), self.limits)
            maps = await self._attention_maps(parsed)
        except UNAVAILABLE:
            raise
        except Exception as error:  # noqa: BLE001 -- the server answers and keeps serving
            return _error(*_attention_failure(error))
        return JSONResponse(attention_api.format_attention_response(maps, parsed.kinds, parsed.sentences))

    async def _attention_page(self, request):
        try:
            maps = await self._attention_maps(attention_api.parse_attention_query(request.query_params, self.limits))
        except UNAVAILABLE:
            raise
        except Exception as error:  # noqa: BLE001 -- the server answers and keeps serving
            message, status = _attention_failure(error)
            return PlainTextResponse(message, status_code=status)
        return HTMLResponse(render_html(maps[0], title=f"Attention of {self.model_name}"))

    async def _attention_maps(self, parsed):
        """The `AttentionMaps` of a parsed attention request, computed in the model thread."""
        if self.artifact.task != "translation":
            raise attention_api.AttentionUnavailable(
                f"This server serves a {self.artifact.task} export: attention is drawn for translation exports, "
                "which have a source, a target and the cross attention between them.")
        targets = await self._translate_missing(parsed.sentences, parsed.targets)
        with self.batcher.holding(len(parsed.sentences)):
            return await self.batcher.run_in_thread(self.model.attention_model.maps, parsed.sentences, targets)

    async def _translate_missing(self, sentences, targets):
        """`targets` with each None replaced by the best translation `:predict` gives with the defaults."""
        missing = [i for i, target in enumerate(targets) if target is None]
        if not missing:
            return list(targets)
        result = await self.batcher.submit([sentences[i] for i in missing], self.artifact.defaults)
        targets = list(targets)
        for i, nbest in zip(missing, result["texts"]):
            targets[i] = nbest[0]
        return targets

    def _check_model(self, request):
        name = request.path_params["name"]
        version = request.path_params.get("version", MODEL_VERSION)
        if name != self.model_name or version != MODEL_VERSION:
            raise HTTPException(404, f"Servable not found for request: model {name!r} version {version}; "
                                     f"this server has {self.model_name!r} version {MODEL_VERSION}.")

    async def _body(self, request):
        """The request body, refused as soon as it exceeds the byte limit."""
        limit = self.limits.max_request_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise rest_api.BadRequest(rest_api.too_large_message(int(declared), limit))
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise rest_api.BadRequest(rest_api.too_large_message(size, limit))
            chunks.append(chunk)
        return b"".join(chunks)


def _attention_failure(error):
    """`(message, HTTP status)` for an error of the attention endpoints."""
    if isinstance(error, attention_api.AttentionUnavailable):
        return str(error), 501
    if isinstance(error, (T2TError, tf.errors.InvalidArgumentError)):
        return str(error), 400
    logger.error("Attention failed.", exc_info=error)
    return f"Attention failed: {error}", 500


async def _http_error(request, error):
    return _error(error.detail, error.status_code)


def _error(message, status):
    return JSONResponse({"error": message}, status_code=status)


def _unavailable(message, retry_after, close=False):
    """503 with Retry-After (whole seconds); `close`: the client should not send more on this connection."""
    headers = {"Retry-After": str(retry_after), **({"Connection": "close"} if close else {})}
    return JSONResponse({"error": message}, status_code=503, headers=headers)
