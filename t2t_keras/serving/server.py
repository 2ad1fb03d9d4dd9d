"""An HTTP server speaking TensorFlow Serving's REST API (Starlette on uvicorn), for every kind of export.

    serve("exports/base", port=8501)        # blocks; SIGTERM or Ctrl+C drains it, then it stops

It serves what `artifacts.open_artifact` opens of an export: a translation SavedModel, a
CTranslate2 model (the same API), a LiteRT file, or an lm's continuation SavedModel, whose
`:predict` takes prompts and `"params": {"max_extra_length": 30, "temperature":
0.8, "top_k": 20, "seed": 1}` and answers `continuations` and `scores`.

Versions, as TF Serving's: one export is version 1; `serve(VersionDirectory("models/base"))` (`t2t-keras
serve --model-base-path DIR`) serves the newest numbered version of a directory, and swaps a newer one in
without dropping a request once it has loaded and checked beside the served one (see `served_model` and
`versions`; the directory policy in `version_source`).

Endpoints (NAME is `model_name`, "default" unless set, as in TF Serving):

* `POST /v1/models/NAME:predict` (also `/v1/models/NAME/versions/N:predict`,
  version N while it is loaded, else 404): translation; request and answer
  formats in `rest_api`. Decoding parameters per request: `"params":
  {"beam_size": 2, "alpha": 0.6, "max_extra_length": 50, "num_return": 2}`,
  or as named columnar inputs. A request is answered by the version it
  started on, whatever is swapped in meanwhile.
* `GET /v1/models/NAME` (also `/versions/N`): the versions and their states
  (START, LOADING, AVAILABLE, UNLOADING, END, with error_code and
  error_message of a failed one), as TF Serving reports them.
* `GET /v1/models/NAME/metadata` (also `/versions/N/metadata`): the
  served version's signatures, decoding defaults and request limits.
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
* `GET /monitoring/prometheus/metrics` (TF Serving's path): the metrics in
  Prometheus' text format (see `metrics`); with `access_log`, one JSON line
  per request to a model's endpoints (see `access_log`).

Concurrent requests with equal decoding parameters are translated together
(see `batcher.RequestBatcher`: at most `max_batch_size` sentences, waiting at
most `max_wait_ms` for company). Bad requests get HTTP 400 and `{"error":
...}`; the server keeps serving. The queue holds `max_queue_seconds` of work
(or `max_queue` sentences): past it, a request gets HTTP 503 at once, with
`Retry-After` (seconds: when to come back, see `admission`) and `{"error":
...}`; a request still queued at its deadline (`deadline_seconds`, or sooner
by its `grpc-timeout` header) gets 503 before it is translated.

The server listens before the export is loaded (see `served_model`), and a
SIGTERM or SIGINT drains it before it stops (see `lifecycle`): meanwhile the
requests that need the model get 503 with `Retry-After`.
"""

import logging
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from t2t_keras.decoding.request import Generation
from t2t_keras.errors import T2TError
from t2t_keras.inspect.html_view import render_html
from t2t_keras.serving import attention_api, rest_api
from t2t_keras.serving.access_log import RequestRecord, open_access_log
from t2t_keras.serving.admission import request_key
from t2t_keras.serving.batcher import Overloaded, ShuttingDown
from t2t_keras.serving.lifecycle import DRAINING, REFUSAL_RETRY_SECONDS, SERVING, DrainingServer
from t2t_keras.serving.live_page import page_routes
from t2t_keras.serving.metrics import CONTENT_TYPE
from t2t_keras.serving.served_model import Pinned, ServedModel
from t2t_keras.serving.versions import AVAILABLE, UNLOADING, VersionNotFound

logger = logging.getLogger(__name__)

UNAVAILABLE = (Overloaded, ShuttingDown)  # answered with 503 by `_Handlers._taken`, not as failures
DEFAULT_MODEL_NAME = "default"  # TF Serving's default --model_name


def serve(export, host="127.0.0.1", port=8501, model_name=DEFAULT_MODEL_NAME, max_batch_size=32,
          max_wait_ms=10, log_level="info", max_queue=None, drain_seconds=None, max_queue_seconds=None,
          deadline_seconds=None, access_log=None, access_log_text=False, **limits):
    """Serves the export until SIGTERM or SIGINT, then drains and returns.

    `export`: an export directory or a function that opens one (both loaded
    after the port opens), an opened export, or a
    `version_source.VersionDirectory` of numbered versions (see
    `served_model`). See the module docstring. `max_queue`: most sentences held at once (None: as many as
    `max_queue_seconds` of work, see `admission`); `drain_seconds`: how long accepted requests may
    take after the signal (None: `lifecycle.DEFAULT_DRAIN_SECONDS`).
    `max_queue_seconds`, `deadline_seconds`: see `admission.Admission`.
    `access_log`: a path to append one JSON line per request to ("-":
    standard error; `access_log_text`: with the sentences). `limits` are `rest_api.Limits` fields: `max_request_bytes`,
    `max_instances`, `max_sentence_chars`. Port 0 picks a free port (logged).

    Raises:
        the error that stopped the export from loading (the server stops then).
    """
    log = None if access_log is None else open_access_log(access_log, access_log_text)
    app = create_app(export, model_name, max_batch_size, max_wait_ms, max_queue=max_queue,
                     max_queue_seconds=max_queue_seconds, deadline_seconds=deadline_seconds, access_log=log, **limits)
    model = app.state.model
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level)
    try:
        DrainingServer(config, model.lifecycle, model.stop, drain_seconds).run()
    finally:
        if log is not None:
            log.close()
    if model.lifecycle.load_error is not None:
        raise model.lifecycle.load_error


def create_app(export, model_name=DEFAULT_MODEL_NAME, max_batch_size=32, max_wait_ms=10, warm_up=True,
               max_queue=None, max_queue_seconds=None, deadline_seconds=None, access_log=None, **limits):
    """The Starlette application serving `export` (see `served_model.ServedModel`, which takes the other arguments).

    The export loads and the batcher starts and stops with the application (its
    lifespan). `app.state.model` holds the `ServedModel`, `app.state.batcher`
    its batcher. `access_log`: an `access_log.AccessLog`, or None.
    """
    model = ServedModel(export, max_batch_size, max_wait_ms, max_queue, warm_up, max_queue_seconds, deadline_seconds)
    handlers = _Handlers(model, model_name, rest_api.Limits(**limits), access_log)
    routes = [
        Route("/healthz", handlers.health, methods=["GET"]),
        Route("/statz", handlers.stats, methods=["GET"]),
        Route("/monitoring/prometheus/metrics", handlers.prometheus_metrics, methods=["GET"]),
        Route("/v1/models/{name}", handlers.status, methods=["GET"]),
        Route("/v1/models/{name}/versions/{version}", handlers.status, methods=["GET"]),
        Route("/v1/models/{name}/metadata", handlers.metadata, methods=["GET"]),
        Route("/v1/models/{name}/versions/{version}/metadata", handlers.metadata, methods=["GET"]),
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

    def __init__(self, model, model_name, limits, access_log=None):
        self.model = model
        self.access_log = access_log
        self.lifecycle = model.lifecycle
        self.batcher = model.batcher
        self.model_name = model_name
        self.limits = limits

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
        """Every version known and its state (see `versions`), or the one the path names, as TF Serving lists them."""
        self._check_model(request)
        version = request.path_params.get("version")
        statuses = [status for status in self.model.versions.statuses() if version in (None, status["version"])]
        if not statuses:
            raise HTTPException(404, f"Could not find {'any versions' if version is None else f'version {version}'} "
                                     f"of model {self.model_name}: GET /v1/models/{self.model_name} lists them.")
        for status in statuses:
            status["state"] = self._reported_state(status["state"])
        return JSONResponse({"model_version_status": statuses})

    def _reported_state(self, state):
        """A version's state as the server's life changes it: an AVAILABLE one is UNLOADING while the server
        drains, and UNAVAILABLE if the translation worker stopped."""
        if state != AVAILABLE or self.lifecycle.status == SERVING and self.batcher.running:
            return state
        return UNLOADING if self.lifecycle.status == DRAINING else "UNAVAILABLE"

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

    async def prometheus_metrics(self, request):
        """`GET /monitoring/prometheus/metrics`, TF Serving's path: the metrics in Prometheus' text format."""
        return Response(self.model.metrics.exposition(), media_type=CONTENT_TYPE)

    async def _taken(self, answer, request):
        """`answer(request, version)` if the server takes requests now, else 503; 503 too when the queue is full or
        the request's deadline passes. Every answer is counted in the metrics and written to the access log.

        `request.state.record` is its `access_log.RequestRecord`, `request.state.arrival` its `admission.Arrival`
        (its key, from its client, path and query, gets its body's in `_body`)."""
        record = request.state.record = RequestRecord(request.method, request.url.path, self.model_name,
                                                      _signature(request.url.path))
        refusal = self.lifecycle.refusal()
        if refusal is not None:
            record.cause = self.lifecycle.status  # "loading" or "draining"
            response = _unavailable(refusal, REFUSAL_RETRY_SECONDS, close=self.lifecycle.status == DRAINING)
        else:
            response = await self._accepted(answer, request, record)
        self._observed(record, response, getattr(request.state, "arrival", None))
        return response

    async def _accepted(self, answer, request, record):
        client = request.client.host if request.client else ""
        try:
            request.state.arrival = self.batcher.admission.arrival(
                request_key(client, request.url.path, request.url.query), request.headers, record.started)
        except T2TError as error:  # a malformed timeout header
            return _error(str(error), 400)
        with self.lifecycle.accepted(), self._version(request).using() as version:
            try:
                return await answer(request, version)
            except Overloaded as error:
                record.cause = error.cause  # "overloaded" or "deadline"
                return _unavailable(str(error), error.retry_after)
            except ShuttingDown as error:
                record.cause = DRAINING
                return _unavailable(str(error), REFUSAL_RETRY_SECONDS, close=True)

    def _observed(self, record, response, arrival):
        """Counts the answered request in the metrics, and writes it to the access log."""
        record.finish(response.status_code)
        if arrival is not None:
            record.queued_seconds = arrival.queued_seconds
        if record.cause is not None:
            record.retry_after = int(response.headers["retry-after"])
        self.model.metrics.request_finished(record.model, record.signature, record.status, record.latency_seconds,
                                            record.cause)
        if self.access_log is not None:
            self.access_log.write(record)

    async def _metadata(self, request, version):
        artifact = version.artifact
        return JSONResponse({
            "model_spec": {"name": self.model_name, "signature_name": "", "version": str(version.number)},
            "metadata": {
                "signature_def": {"signature_def": artifact.signature_defs()},
                "decoding": {"defaults": rest_api.defaults(artifact), **artifact.limits()},
                "limits": vars(self.limits),
            },
        })

    async def _predict(self, request, version):
        artifact = version.artifact  # the version the request started on answers it, whatever is swapped in
        try:
            parsed = rest_api.parse_predict_request(await self._body(request), self.limits,
                                                    rest_api.parameter_names(artifact), artifact.signature_names)
            record, arrival = request.state.record, request.state.arrival
            record.signature = parsed.signature_name
            record.sentences, record.text = len(parsed.sentences), parsed.sentences
            generation_request = artifact.request(**parsed.params, constraints=parsed.constraints)
            if parsed.constraints is not None:  # a batch of its own: its lines carry their terms
                record.signature = "translate_constrained"
                with self.batcher.holding(len(parsed.sentences), arrival):
                    result = await self.batcher.run_in_thread(artifact.generate, parsed.sentences,
                                                              generation_request)
            else:
                result = Generation(**await self.batcher.submit(parsed.sentences,
                                                                Pinned(version, generation_request), arrival))
        except bad_request_errors() as error:
            return _error(str(error), 400)
        except UNAVAILABLE:
            raise
        except Exception as error:  # noqa: BLE001 -- the server answers and keeps serving
            logger.exception("Translation failed.")
            return _error(f"Translation failed: {error}", 500)
        outputs = rest_api.predict_outputs(result, generation_request, artifact.task)
        return JSONResponse(rest_api.format_predict_response(outputs, parsed.columnar))

    async def _attention(self, request, version):
        try:
            parsed = attention_api.parse_attention_request(await self._body(request), self.limits)
            maps = await self._attention_maps(parsed, version, request.state.arrival)
        except UNAVAILABLE:
            raise
        except Exception as error:  # noqa: BLE001 -- the server answers and keeps serving
            return _error(*_attention_failure(error))
        return JSONResponse(attention_api.format_attention_response(maps, parsed.kinds, parsed.sentences))

    async def _attention_page(self, request, version):
        try:
            maps = await self._attention_maps(attention_api.parse_attention_query(request.query_params, self.limits),
                                              version, request.state.arrival)
        except UNAVAILABLE:
            raise
        except Exception as error:  # noqa: BLE001 -- the server answers and keeps serving
            message, status = _attention_failure(error)
            return PlainTextResponse(message, status_code=status)
        return HTMLResponse(render_html(maps[0], title=f"Attention of {self.model_name}"))

    async def _attention_maps(self, parsed, version, arrival=None):
        """The `AttentionMaps` of a parsed attention request on `version`, computed in the model thread; `arrival`:
        its `admission.Arrival`."""
        if version.artifact.task != "translation":
            raise attention_api.AttentionUnavailable(
                f"This server serves a {version.artifact.task} export: attention is drawn for translation exports, "
                "which have a source, a target and the cross attention between them.")
        targets = await self._translate_missing(parsed.sentences, parsed.targets, version, arrival)
        with self.batcher.holding(len(parsed.sentences), arrival):
            return await self.batcher.run_in_thread(version.attention_model.maps, parsed.sentences, targets)

    async def _translate_missing(self, sentences, targets, version, arrival=None):
        """`targets` with each None replaced by the best translation `:predict` gives with the defaults."""
        missing = [i for i, target in enumerate(targets) if target is None]
        if not missing:
            return list(targets)
        result = await self.batcher.submit([sentences[i] for i in missing],
                                           Pinned(version, version.artifact.defaults), arrival)
        targets = list(targets)
        for i, nbest in zip(missing, result["texts"]):
            targets[i] = nbest[0]
        return targets

    def _check_model(self, request):
        name = request.path_params["name"]
        if name != self.model_name:
            raise HTTPException(404, f"Servable not found for request: model {name!r}; "
                                     f"this server has {self.model_name!r}.")

    def _version(self, request):
        """The version the request's path names, else the served one (404 unless it is loaded)."""
        try:
            return self.model.versions.find(request.path_params.get("version"))
        except VersionNotFound as error:
            raise HTTPException(404, str(error)) from None

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
        body = b"".join(chunks)
        arrival = request.state.arrival
        arrival.key = request_key(arrival.key, body)  # a retry sends the same body again
        return body


def _signature(path):
    """The signature label of a request to `path`, until its body names one."""
    if path.endswith("/metadata"):
        return "metadata"
    return "attention" if path.endswith("attention") else "serving_default"


def bad_request_errors():
    """The errors answered 400: ours, and TensorFlow's InvalidArgumentError (a SavedModel's own range checks) where
    a model has loaded TensorFlow; a CTranslate2 export is served without it."""
    tf = sys.modules.get("tensorflow")
    return (T2TError,) if tf is None else (T2TError, tf.errors.InvalidArgumentError)


def _attention_failure(error):
    """`(message, HTTP status)` for an error of the attention endpoints."""
    if isinstance(error, attention_api.AttentionUnavailable):
        return str(error), 501
    if isinstance(error, bad_request_errors()):
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
