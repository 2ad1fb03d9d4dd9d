"""Serving a continuation export (an lm run) over TensorFlow Serving's REST predict format.

    POST /v1/models/NAME:predict
    {"instances": ["Ein Anfang"], "params": {"temperature": 0.8, "top_k": 20, "max_new_tokens": 30, "seed": 1}}
    -> {"predictions": [{"continuations": "...", "scores": -12.3}]}
    {"inputs": ["Ein Anfang"], ...}  (columnar)  -> {"outputs": {"continuations": [...], "scores": [...]}}

Every sampling parameter is optional and per request (the export's defaults
otherwise; no seed draws a fresh one). `GET /v1/models/NAME` reports the
status, as for translation exports.
"""

import logging

import tensorflow as tf
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.routing import Route

from t2t_keras.errors import T2TError
from t2t_keras.export.continuation_export import SavedModelContinuer
from t2t_keras.serving import rest_api

logger = logging.getLogger(__name__)

PARAMETER_NAMES = ("max_new_tokens", "temperature", "top_k", "seed")
MODEL_VERSION = "1"


def parse_continuation_request(body, limits=rest_api.Limits()):
    """`(prompts, params, columnar)` from a JSON body; raises `rest_api.BadRequest` naming what is wrong."""
    request = rest_api.parse_json_body(body, limits)
    if not isinstance(request, dict) or ("instances" in request) == ("inputs" in request):
        raise rest_api.BadRequest('The request must be a JSON object with exactly one of "instances" (row format) '
                                  'or "inputs" (columnar format), and optionally "params".')
    unknown = sorted(set(request) - {"instances", "inputs", "params"})
    if unknown:
        raise rest_api.BadRequest(f"Unknown fields {unknown}: expected instances or inputs, and params.")
    params = request.get("params", {})
    if not isinstance(params, dict) or set(params) - set(PARAMETER_NAMES):
        raise rest_api.BadRequest(f'"params" must be an object with some of {list(PARAMETER_NAMES)}. '
                                  f"Received: {params!r}")
    prompts = request.get("instances", request.get("inputs"))
    if not isinstance(prompts, list) or not all(isinstance(prompt, str) for prompt in prompts):
        raise rest_api.BadRequest("The prompts must be a list of strings.")
    if len(prompts) > limits.max_instances:
        raise rest_api.BadRequest(f"The request holds {len(prompts)} prompts; the limit is {limits.max_instances}.")
    return prompts, params, "inputs" in request


def format_continuation_response(result, columnar):
    if columnar:
        return {"outputs": result}
    return {"predictions": [{"continuations": text, "scores": score}
                            for text, score in zip(result["continuations"], result["scores"])]}


def create_continuation_app(continuer, model_name="default", **limits):
    """The Starlette application serving `continuer` (a `SavedModelContinuer` or an export directory)."""
    if not isinstance(continuer, SavedModelContinuer):
        continuer = SavedModelContinuer(continuer)
    limits = rest_api.Limits(**limits)

    def check_model(request):
        name, version = request.path_params["name"], request.path_params.get("version", MODEL_VERSION)
        if name != model_name or version != MODEL_VERSION:
            raise HTTPException(404, f"Servable not found: model {name!r} version {version}; this server has "
                                     f"{model_name!r} version {MODEL_VERSION}.")

    async def predict(request):
        check_model(request)
        try:
            prompts, params, columnar = parse_continuation_request(await request.body(), limits)
            result = await run_in_threadpool(continuer.predict, prompts, continuer.parameters(**params))
        except (T2TError, tf.errors.InvalidArgumentError) as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        return JSONResponse(format_continuation_response(result, columnar))

    async def status(request):
        check_model(request)
        return JSONResponse({"model_version_status": [{"version": MODEL_VERSION, "state": "AVAILABLE",
                                                       "status": {"error_code": "OK", "error_message": ""}}]})

    return Starlette(routes=[
        Route("/v1/models/{name}:predict", predict, methods=["POST"]),
        Route("/v1/models/{name}/versions/{version}:predict", predict, methods=["POST"]),
        Route("/v1/models/{name}", status, methods=["GET"]),
    ])


def serve_continuations(saved_model_dir, host="127.0.0.1", port=8501, model_name="default", max_batch_size=32,
                        log_level="info", **limits):
    """Loads a continuation export and serves it until interrupted."""
    app = create_continuation_app(SavedModelContinuer(saved_model_dir, batch_size=max_batch_size), model_name,
                                  **limits)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
