"""TensorFlow Serving's REST predict format: parsing request bodies, shaping answers.

Shown here for translation; an lm export takes prompts the same way, with its own
parameter and signature names (`artifacts.saved_model`), and answers `continuations`.

Request body, a JSON object with one of:

    {"instances": ["A sentence.", "Another one."]}             row format: strings
    {"instances": [{"inputs": "A sentence."}, ...]}             row format: objects with the input "inputs"
    {"inputs": ["A sentence.", "Another one."]}                 columnar format
    {"inputs": {"inputs": ["A sentence."], "beam_size": 2}}     columnar, named inputs

and optionally `"params": {"beam_size": 2, "alpha": 0.6, "max_extra_length": 50,
"num_return": 2}` (decoding parameters for the whole request; sampling takes
`"beam_size": 1, "temperature": 1.0, "epsilon": 0.02, "seed": 7, "num_return": 8`
and `"top_k"`, `"top_p"`, where the artifact samples; in the
columnar named form they may also stand beside "inputs", as scalars; a
multilingual model's also take `"src_lang": "fra_Latn", "tgt_lang": "deu_Latn"`,
a language code it lacks is a 400 naming it; minimum Bayes risk decoding takes
`"mbr": "chrf", "candidates": 8, "candidates_from": "beam", "mbr_aggregate": false`,
as translate's flags of those names) and
`"signature_name"`: "serving_default" or "translate" (both run the same
search). Parameters left out take the export's defaults.

Terminology: `"constraints": [["rotes Haus"], []]` beside the sentences, one
list of target terms per sentence ([] for none), asks for translations that
hold them (the export's `translate_constrained` signature; `num_return` 1).
Its answer adds, per sentence, `satisfied` and `error`: null, or why its
translation ("") could not hold its terms; the other sentences translate.

Quality estimate (a model with one: `t2t-keras qe-train`): `"params": {"quality": true}` adds, per sentence,
`quality`, the best translation's estimate in [0, 1]; `"min_quality": 0.3` answers "" in place of a translation
estimated below it (its `quality` still given). A model without an estimate refuses both (400).

Answers follow TF Serving: row format gives `{"predictions": [{"translations":
..., "scores": ..., "truncated": ...}, ...]}` (one object per instance),
columnar gives `{"outputs": {"translations": [...], "scores": [...],
"truncated": [...]}}`. With `num_return` > 1, each translation and score is a
list, best first. Errors are `{"error": "..."}`.
"""

import dataclasses
import json
import math

from t2t_keras.decoding.mbr import MBR_FIELDS
from t2t_keras.decoding.request import QUALITY, GenerationRequest, below_quality
from t2t_keras.errors import T2TError

TOP_LEVEL_FIELDS = ("instances", "inputs", "params", "signature_name", "constraints")
SIGNATURE_NAMES = ("serving_default", "translate")
# The request fields a REST "params" may set, where the served artifact takes them (`artifact.accepts`).
REST_PARAMETERS = ("beam_size", "alpha", "max_extra_length", "num_return", "temperature", "top_k", "top_p", "epsilon",
                   "seed", "src_lang", "tgt_lang") + MBR_FIELDS + QUALITY
PARAMETER_NAMES = REST_PARAMETERS[:4]  # a translation export's


class BadRequest(T2TError):
    """A request the server answers with HTTP 400 and this message."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may hold."""

    max_request_bytes: int = 1 << 20  # size of the JSON body
    max_instances: int = 64  # sentences per request
    max_sentence_chars: int = 2000  # characters per sentence (longer token sequences are cut and flagged)


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    sentences: list
    params: dict  # decoding parameters by name, unchecked
    columnar: bool
    constraints: list = None  # None, or per sentence its target terms (`serving.constraints`)
    signature_name: str = "serving_default"


def parse_json_body(body, limits=Limits()):
    """The decoded JSON of a request body (bytes) within the size limit; raises `BadRequest` otherwise."""
    if len(body) > limits.max_request_bytes:
        raise BadRequest(too_large_message(len(body), limits.max_request_bytes))
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"The request body is not valid JSON ({error}): send a JSON object.") from None


def parse_predict_request(body, limits=Limits(), parameter_names=PARAMETER_NAMES, signature_names=SIGNATURE_NAMES):
    """A `PredictRequest` from a JSON body (bytes); raises `BadRequest` naming what is wrong.

    `parameter_names` and `signature_names` are those of the served export (translation's by default).
    """
    request = parse_json_body(body, limits)
    if not isinstance(request, dict):
        raise BadRequest('The request must be a JSON object with "instances" or "inputs".')
    for field in request:
        if field not in TOP_LEVEL_FIELDS:
            raise BadRequest(f'Unknown field "{field}": expected "instances" or "inputs", '
                             'and optionally "params", "signature_name" and "constraints".')
    signature_name = request.get("signature_name", "serving_default")
    _check_signature_name(signature_name, signature_names)
    if ("instances" in request) == ("inputs" in request):
        raise BadRequest('The request needs exactly one of "instances" (row format) or "inputs" (columnar format).')
    params = _params(request.get("params", {}), parameter_names)
    if "instances" in request:
        sentences, columnar = _row_sentences(request["instances"]), False
    else:
        sentences, named = _columnar_sentences(request["inputs"], parameter_names)
        _merge_params(params, named)
        columnar = True
    _check_sentences(sentences, limits)
    return PredictRequest(sentences, params, columnar, _constraints(request.get("constraints"), sentences),
                          signature_name)


def parameter_names(artifact):
    """The REST "params" names the served `artifact` takes."""
    return tuple(name for name in REST_PARAMETERS if name in artifact.accepts or (
        name in MBR_FIELDS and "num_return" in artifact.accepts))  # MBR: where it returns several candidates


def defaults(artifact):
    """The served artifact's default "params", as its metadata lists them."""
    return {name: getattr(artifact.defaults, name) for name in parameter_names(artifact)}


def predict_outputs(generation, request, task):
    """The answer's columns of a `Generation`: translations (with `num_return` > 1, n-best lists), scores and
    truncation flags; with constraints also `satisfied` and `error`; an lm's continuations and scores."""
    if task != "translation":
        return {"continuations": generation.best, "scores": [finite(row[0]) for row in generation.scores]}
    nbest = request.num_return > 1
    outputs = {"translations": [row if nbest else row[0] for row in generation.texts],
               "scores": [[finite(s) for s in row] if nbest else finite(row[0]) for row in generation.scores],
               "truncated": list(generation.truncated)}
    if request.constraints is not None:
        outputs["satisfied"] = [error is None for error in generation.errors]
        outputs["error"] = list(generation.errors)
    if generation.quality is not None:  # "quality": true, or a "min_quality" whose withheld lines answer ""
        for index in below_quality(generation, request.min_quality):
            outputs["translations"][index] = [""] * request.num_return if nbest else ""
        outputs["quality"] = [finite(value) for value in generation.quality]
    return outputs


def finite(value):
    """JSON has no infinities or NaN: they become null."""
    return value if math.isfinite(value) else None


def format_predict_response(outputs, columnar):
    """The JSON-ready answer from an export's output columns (`predict_outputs`)."""
    if columnar:
        return {"outputs": outputs}
    names = list(outputs)
    return {"predictions": [dict(zip(names, values)) for values in zip(*outputs.values())]}


def too_large_message(size, limit):
    return f"The request body has {size} bytes; the limit is {limit}: send fewer or shorter sentences."


def _check_signature_name(name, signature_names):
    if name not in signature_names:
        raise BadRequest(f"Unknown signature_name {name!r}: use one of {list(signature_names)}.")


def _params(params, parameter_names):
    if not isinstance(params, dict):
        raise BadRequest(f'"params" must be an object, e.g. {{"{parameter_names[0]}": 2}}.')
    for name in params:
        if name not in parameter_names:
            hint = (" (the served model has no quality estimate: train one with t2t-keras qe-train --run-dir RUN, "
                    "then export the run again)" if name in QUALITY else "")
            raise BadRequest(f'Unknown decoding parameter "{name}"{hint}: use {list(parameter_names)}.')
    return dict(params)


def _row_sentences(instances):
    if not isinstance(instances, list):
        raise BadRequest('"instances" must be a list of strings or of {"inputs": string} objects.')
    sentences = []
    for index, instance in enumerate(instances):
        if isinstance(instance, dict):
            extra = sorted(set(instance) - {"inputs"})
            if extra or "inputs" not in instance:
                raise BadRequest(f'instances[{index}] must hold the one field "inputs" (found {sorted(instance)}); '
                                 'decoding parameters go in "params".')
            instance = instance["inputs"]
        if not isinstance(instance, str):
            raise BadRequest(f"instances[{index}] is {_json_type(instance)}, not a string: send text only.")
        sentences.append(instance)
    return sentences


def _columnar_sentences(inputs, parameter_names):
    """The sentences, and the parameters given as named inputs."""
    named = {}
    if isinstance(inputs, dict):
        if "inputs" not in inputs:
            raise BadRequest('Named "inputs" must include "inputs", the list of sentences.')
        named = {name: value for name, value in inputs.items() if name != "inputs"}
        _params(named, parameter_names)
        inputs = inputs["inputs"]
    if not isinstance(inputs, list):
        raise BadRequest('"inputs" must be a list of strings (or an object whose "inputs" is one).')
    for index, sentence in enumerate(inputs):
        if not isinstance(sentence, str):
            raise BadRequest(f"inputs[{index}] is {_json_type(sentence)}, not a string: send text only.")
    return inputs, named


def _merge_params(params, named):
    both = sorted(set(params) & set(named))
    if both:
        raise BadRequest(f'{both} given both in "params" and as named inputs: give each once.')
    params.update(named)


def _check_sentences(sentences, limits):
    if not sentences:
        raise BadRequest("The request holds no sentences: send at least one.")
    if len(sentences) > limits.max_instances:
        raise BadRequest(f"The request holds {len(sentences)} sentences; the limit is {limits.max_instances}: "
                         "split it into several requests.")
    for index, sentence in enumerate(sentences):
        if len(sentence) > limits.max_sentence_chars:
            raise BadRequest(f"Sentence {index} has {len(sentence)} characters; the limit is "
                             f"{limits.max_sentence_chars}: split long text into sentences.")


def _constraints(constraints, sentences):
    """None, or the request's per-sentence target terms, checked (one list per sentence)."""
    if constraints is None:
        return None
    try:
        checked = GenerationRequest(constraints=constraints).constraints
    except T2TError as error:
        raise BadRequest(str(error)) from None
    if len(checked) != len(sentences):
        raise BadRequest(f"constraints must be a list with one list of target terms per sentence ({len(sentences)}), "
                         "e.g. [[\"rotes Haus\"], []].")
    return [list(terms) for terms in checked]


def _json_type(value):
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
