"""Serving an export over HTTP, as TensorFlow Serving's REST API does, plus a page to try it.

* `rest_api`: parsing and formatting TF Serving's request and response bodies.
* `batcher`: groups concurrent requests into one model call; its queue is bounded.
* `admission`: the queue's bound in seconds of work, Retry-After and the line of refused requests, deadlines.
* `metrics`, `access_log`: the Prometheus metrics and the per-request JSON log.
* `served_model`: the export, loaded in the model thread once the server listens.
* `lifecycle`: loading, serving, draining; uvicorn's server with a drain before its stop.
* `server`: the Starlette application and `serve` (`t2t-keras serve`).
* `attention_api`: the `:attention` endpoint (attention weights of a sentence and a translation).
* `live_page`: the page at `GET /` (files in `page/`).
"""
