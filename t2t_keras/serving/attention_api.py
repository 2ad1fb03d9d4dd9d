"""The server's attention endpoint: attention weights of a source sentence and its translation, over REST.

    POST /v1/models/NAME:attention
    {"instances": [{"inputs": "The cat sleeps.", "targets": "Die Katze schläft."}],
     "params": {"kinds": ["cross"]}}

Each instance is a source sentence, as a string or as `{"inputs": ...}`, with
optionally `"targets"`: the translation to look at (e.g. one hypothesis of the
n-best list that `:predict` returned). Without `"targets"` the server
translates the sentence first, as `:predict` does with the export's defaults,
and shows the best translation. `"params": {"kinds": [...]}` chooses the
attention kinds among "encoder", "decoder_self" and "cross" (default: cross
only, the encoder-decoder attention).

The answer, in TF Serving's row format, holds one object per instance in the
data format of `inspect`'s HTML view (`html_view.page_data`): `"tokens"`
(`"source"` pieces ending with `</s>`; `"target"` pieces, the decoder input,
starting with `<s>`), `"kinds"` (per kind: `"weights"` as `[layer][head][query]
[key]`, with a title, a description and the axis names), `"num_heads"`, plus
`"output_tokens"` (row t of a decoder map reads `target[t]` and predicts
`output_tokens[t]`: the target pieces, then `</s>`), `"translation"` and
`"inputs"`.

The weights come from the Keras model and tokenizer a text export keeps in
`assets.extra/` (see `runs.write_inspection_files`), loaded at
the first request; the forward pass is `inspect.extract_attention`'s. A source
or target longer than the model reads (`max_length` - 1 pieces) is refused
with HTTP 400 rather than cut: `:predict` would have translated a shortened
source, and the map would not show what the model read.
"""

import dataclasses
import threading

from t2t_keras.errors import T2TError
from t2t_keras.inspect.html_view import page_data
from t2t_keras.inspect.kinds import KINDS
from t2t_keras.serving.rest_api import BadRequest, Limits, parse_json_body

DEFAULT_KINDS = ("cross",)
TOP_LEVEL_FIELDS = ("instances", "params")
INSTANCE_FIELDS = ("inputs", "targets")
EOS_PIECE = "</s>"  # the label of the last output row (see `output_tokens`)


class AttentionUnavailable(T2TError):
    """The export carries no Keras model to compute attention with (e.g. an ids-only export)."""


@dataclasses.dataclass(frozen=True)
class AttentionRequest:
    sentences: list  # source sentences
    targets: list  # per sentence, the translation to inspect, or None: translate first
    kinds: tuple  # attention kinds to answer with, in `KINDS` order


def parse_attention_request(body, limits=Limits()):
    """An `AttentionRequest` from a JSON body (bytes); raises `BadRequest` naming what is wrong."""
    request = parse_json_body(body, limits)
    if not isinstance(request, dict) or "instances" not in request:
        raise BadRequest('The request must be a JSON object with "instances", e.g. '
                         '{"instances": [{"inputs": "A sentence.", "targets": "Ein Satz."}]}.')
    unknown = sorted(set(request) - set(TOP_LEVEL_FIELDS))
    if unknown:
        raise BadRequest(f'Unknown field "{unknown[0]}": expected "instances" and optionally "params".')
    sentences, targets = _instances(request["instances"], limits)
    return AttentionRequest(sentences, targets, _kinds(request.get("params", {})))


def parse_attention_query(query, limits=Limits()):
    """An `AttentionRequest` of every kind for one sentence pair given as URL query parameters.

    `query` maps "inputs" (the source sentence) and optionally "targets" to
    strings, e.g. Starlette's `request.query_params`.
    """
    sentences, targets = _instances([dict(query)], limits)
    return AttentionRequest(sentences, targets, KINDS)


def format_attention_response(maps_list, kinds, inputs):
    """The JSON-ready answer: `{"predictions": [...]}`, one `page_data` object per `AttentionMaps`."""
    predictions = []
    for maps, source in zip(maps_list, inputs):
        data = page_data(maps)
        data["order"] = list(kinds)
        data["kinds"] = {kind: data["kinds"][kind] for kind in kinds}
        data["output_tokens"] = list(maps.target_tokens[1:]) + [EOS_PIECE]
        data["translation"] = maps.translation
        data["inputs"] = source
        predictions.append(data)
    return {"predictions": predictions}


class AttentionModel:
    """The Keras model and tokenizer of an export, loaded once at first use; computes `AttentionMaps`.

    Args:
        export_dir: a text export of `t2t-keras export`, or None for a server
            without one (every request then gets `AttentionUnavailable`).
    """

    def __init__(self, export_dir):
        self.export_dir = export_dir
        self._loaded = None
        self._lock = threading.Lock()

    def maps(self, sentences, targets):
        """`AttentionMaps` of each sentence against its target text (call from the model thread)."""
        if any(target is None for target in targets):
            raise ValueError("Every sentence needs its target text: translate the others first.")
        from t2t_keras.inspect.attention import extract_attention  # TensorFlow's: only where a model serves maps

        model, tokenizer = self._load()
        _check_lengths(model.max_length, tokenizer, sentences, "inputs")
        _check_lengths(model.max_length, tokenizer, targets, "targets")
        return [extract_attention(model, tokenizer, source, target) for source, target in zip(sentences, targets)]

    def _load(self):
        with self._lock:
            if self._loaded is None:
                if self.export_dir is None:
                    raise AttentionUnavailable("This server cannot show attention: it serves no SavedModel "
                                               "export with a Keras model in assets.extra/.")
                try:  # the loader of `t2t-keras inspect --saved-model`, which reads the same files
                    from t2t_keras.runs import load_export  # TensorFlow's, as the maps

                    self._loaded = load_export(self.export_dir)
                except T2TError as error:
                    raise AttentionUnavailable(f"This server cannot show attention: {error}") from None
            return self._loaded


def _check_lengths(max_length, tokenizer, texts, field):
    """Refuses texts longer than the model reads: the translation would have seen a shortened source."""
    import tensorflow as tf

    for index, ids in enumerate(tokenizer.tokenize(tf.constant(list(texts), tf.string)).to_list()):
        if len(ids) + 1 > max_length:  # + EOS (source) or BOS (target)
            raise BadRequest(f'instances[{index}]["{field}"] has {len(ids)} pieces; the model reads at most '
                             f"{max_length - 1}: shorten it to see its attention.")


def _instances(instances, limits):
    if not isinstance(instances, list) or not instances:
        raise BadRequest('"instances" must be a non-empty list of strings or of '
                         '{"inputs": string, "targets": string} objects.')
    if len(instances) > limits.max_instances:
        raise BadRequest(f"The request holds {len(instances)} sentences; the limit is {limits.max_instances}: "
                         "split it into several requests.")
    sentences, targets = [], []
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict):
            instance = {"inputs": instance}
        unknown = sorted(set(instance) - set(INSTANCE_FIELDS))
        if unknown or "inputs" not in instance:
            raise BadRequest(f'instances[{index}] must hold "inputs" and optionally "targets" '
                             f"(found {sorted(instance)}).")
        for field in INSTANCE_FIELDS:
            value = instance.get(field, "")
            if not isinstance(value, str):
                raise BadRequest(f'instances[{index}]["{field}"] must be a string. Received: {value!r}')
            if len(value) > limits.max_sentence_chars:
                raise BadRequest(f'instances[{index}]["{field}"] has {len(value)} characters; the limit is '
                                 f"{limits.max_sentence_chars}: split long text into sentences.")
        if not instance["inputs"].strip():
            raise BadRequest(f'instances[{index}]["inputs"] is empty: send a sentence to look at.')
        sentences.append(instance["inputs"])
        targets.append(instance.get("targets"))
    return sentences, targets


def _kinds(params):
    if not isinstance(params, dict):
        raise BadRequest('"params" must be an object, e.g. {"kinds": ["cross"]}.')
    unknown = sorted(set(params) - {"kinds"})
    if unknown:
        raise BadRequest(f'Unknown attention parameter "{unknown[0]}": use "kinds".')
    kinds = params.get("kinds", list(DEFAULT_KINDS))
    if not isinstance(kinds, list) or not kinds or any(kind not in KINDS for kind in kinds):
        raise BadRequest(f'"kinds" must be a non-empty list drawn from {list(KINDS)}. Received: {kinds!r}')
    return tuple(kind for kind in KINDS if kind in kinds)
