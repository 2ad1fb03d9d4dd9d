"""Translating from Python with an exported SavedModel: load, check decoding parameters, call in batches.

    translator = SavedModelTranslator("exports/base")
    translator.translate(["A sentence."], beam_size=2)             # ["Ein Satz."]
    translator.predict(["A sentence."], translator.decoding_params(num_return=2))
"""

import dataclasses
import math
import pathlib

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from t2t_keras.decoding.batch_shapes import pad_rows_to_power_of_two
from t2t_keras.decoding.parameters import DecodingParams, check_beam_size
from t2t_keras.errors import T2TError
from t2t_keras.export.integrity import verify_export

PARAMETER_NAMES = tuple(field.name for field in dataclasses.fields(DecodingParams))  # a request's "params"


class TranslatorBase:
    """What the REST server needs of a translator, whatever runs the model.

    Subclasses set `path`, `defaults` (`DecodingParams`), `max_beam_size` and
    `max_source_length`, and implement `predict(sentences, params)` and
    `signature_defs()`; checking parameters and `translate` are shared here.
    The server reads `parameter_names`, `signature_names`, `limits()` and
    `outputs()` of whatever it serves (see `export.continuer` for the other kind).
    """

    task = "translation"
    kind = "saved_model"  # what `artifacts.open_artifact` opened
    parameter_names = PARAMETER_NAMES
    signature_names = ("serving_default", "translate")  # both run the same search

    def limits(self):
        """What a caller may ask for, as the server's metadata lists it."""
        return {"max_beam_size": self.max_beam_size, "max_source_length": self.max_source_length}

    def outputs(self, result, params):
        """`predict`'s result as the REST API's columns: with `num_return` 1, one translation and score each."""
        nbest = params.num_return > 1
        return {
            "translations": [row if nbest else row[0] for row in result["translations"]],
            "scores": [[finite(s) for s in row] if nbest else finite(row[0]) for row in result["scores"]],
            "truncated": list(result["truncated"]),
        }

    def decoding_params(self, beam_size=None, alpha=None, max_extra_length=None, num_return=None):
        """The export's default `DecodingParams` with the given values (None: the default), checked.

        Raises:
            T2TError: a value has the wrong type or is out of range (a beam over `max_beam_size` too).
        """
        params = self.defaults.updated(beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
                                       num_return=1 if num_return is None else num_return)
        check_beam_size(params.beam_size, self.max_beam_size)
        # The signature's precision, so that equal settings compare equal (and share a server batch).
        return dataclasses.replace(params, alpha=float(np.float32(params.alpha)))

    def scorer(self):
        """Itself: it scores given translations (`score_batch`, `piece_lengths`, `max_length`)."""
        return self

    def translate(self, sentences, beam_size=None, alpha=None, max_extra_length=None):
        """The best translation of each sentence (a list of str), in input order."""
        params = self.decoding_params(beam_size, alpha, max_extra_length)
        return [nbest[0] for nbest in self.predict(sentences, params)["translations"]]


class SavedModelTranslator(TranslatorBase):
    """Translates lists of strings with a SavedModel written by `export_run`.

    Loads the export with `tf.saved_model.load` (after importing
    `tensorflow_text`, which registers the tokenizer's ops) and calls its
    `translate` signature `batch_size` sentences at a time. An XLA-compiled
    export gets batches padded to a power-of-two number of rows (repeating the
    first sentence), so it compiles for few shapes.

    Args:
        path: the export directory.
        batch_size: most sentences per SavedModel call.

    Attributes:
        saved_model: the loaded SavedModel (its `signatures` are callable).
        defaults: the export's default `DecodingParams`.
        max_beam_size: largest beam size the export accepts.
        max_source_length: longest input in pieces; longer ones are cut and flagged.
    """

    def __init__(self, path, batch_size=32, loaded=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1. Received: batch_size={batch_size}")
        self.path = pathlib.Path(path)
        self.batch_size = batch_size
        loaded = _checked_translation_export(self.path, loaded or load_saved_model(self.path))
        self.saved_model = loaded
        self._tokenizer = None  # loaded when scoring needs piece counts
        self._translate = loaded.signatures["translate"]
        self.max_beam_size = int(loaded.max_beam_size.numpy())
        self.max_source_length = int(loaded.max_source_length.numpy())
        self.jit_compiled = bool(loaded.jit_compiled.numpy())
        self.defaults = DecodingParams(int(loaded.default_beam_size.numpy()), float(loaded.default_alpha.numpy()),
                                       int(loaded.default_max_extra_length.numpy()))

    def predict(self, sentences, params=None):
        """n-best translations with scores and truncation flags.

        Args:
            sentences: a list of str.
            params: `DecodingParams` (from `decoding_params`); None uses the defaults.

        Returns:
            dict with `translations` (per sentence, a list of `num_return` str,
            best first), `scores` (the same shape, floats) and `truncated`
            (per sentence, whether the input was cut to `max_source_length`).
        """
        sentences = _checked_sentences(sentences)
        params = params or self.defaults
        result = {"translations": [], "scores": [], "truncated": []}
        for start in range(0, len(sentences), self.batch_size):
            chunk = sentences[start:start + self.batch_size]
            out = self._call(chunk, params)
            result["translations"] += [[t.decode("utf-8", errors="replace") for t in row]
                                       for row in out["translations"][:len(chunk)]]
            result["scores"] += out["scores"][:len(chunk)].tolist()
            result["truncated"] += out["truncated"][:len(chunk)].tolist()
        return result

    @property
    def max_length(self):
        """The model's limit in tokens, EOS included."""
        return self.max_source_length + 1

    def piece_lengths(self, sentences):
        """Piece counts of `sentences`, from the tokenizer saved beside the export."""
        if self._tokenizer is None:
            from t2t_keras.data.tokenizers import find_tokenizer, load_tokenizer

            self._tokenizer = load_tokenizer(find_tokenizer(self.path / "assets.extra"))  # DataError if missing
        if not sentences:
            return []
        return self._tokenizer.tokenize(tf.constant(sentences)).row_lengths().numpy().tolist()

    def score_batch(self, sources, targets):
        """Forced decoding with the `score` signature: sums `(n,)` and per-token NLL arrays of `n` pairs."""
        if "score" not in self.saved_model.signatures:
            raise T2TError(f"{self.path} has no 'score' signature: export the run again with this version.")
        out = self.saved_model.signatures["score"](inputs=tf.constant(sources, tf.string),
                                                   targets=tf.constant(targets, tf.string))
        nll, lengths = out["token_nll"].numpy(), out["target_length"].numpy()
        return out["nll"].numpy(), [row[:n] for row, n in zip(nll, lengths)]

    def signature_defs(self):
        return signature_defs(self.saved_model)

    def _call(self, sentences, params):
        """One call of the `translate` signature; numpy outputs."""
        if self.jit_compiled:
            sentences = pad_rows_to_power_of_two(sentences)
        out = self._translate(
            inputs=tf.constant(sentences, tf.string),
            beam_size=tf.constant(params.beam_size, tf.int32),
            alpha=tf.constant(params.alpha, tf.float32),
            max_extra_length=tf.constant(params.max_extra_length, tf.int32),
            num_return=tf.constant(params.num_return, tf.int32),
        )
        return {name: value.numpy() for name, value in out.items()}


def load_saved_model(path):
    """The SavedModel at `path`, loaded once, with the TF-Text ops its tokenizer needs registered."""
    path = pathlib.Path(path)
    if not (path / "saved_model.pb").exists():
        raise T2TError(f"{path} is not a SavedModel directory (no saved_model.pb): export a run with "
                       "t2t-keras export.")
    try:
        import tensorflow_text  # noqa: F401  (registers the tokenizer's TF-Text ops the export uses)
    except ImportError:
        raise T2TError("Translating text with an export needs tensorflow-text: pip install tensorflow-text.") from None
    verify_export(path)  # a damaged file is named before TensorFlow reads it
    return tf.saved_model.load(str(path))


def _checked_translation_export(path, loaded):
    if "translate" not in loaded.signatures or not hasattr(loaded, "default_beam_size"):
        raise T2TError(
            f"{path} has no 'translate' signature: it is not a text export of export_run "
            "(an ids-only export takes token ids: call its 'translate_ids' signature)."
        )
    return loaded


def signature_defs(saved_model):
    """A SavedModel's signatures as TF Serving's metadata lists them: inputs and outputs with dtype and shape."""
    return {
        name: {"inputs": _tensor_infos(function.structured_input_signature[1]),
               "outputs": _tensor_infos(function.structured_outputs),
               "method_name": "tensorflow/serving/predict"}
        for name, function in saved_model.signatures.items()
    }


def finite(value):
    """JSON has no infinities or NaN: they become null."""
    return value if math.isfinite(value) else None


def _tensor_infos(tensors):
    return {
        name: {"dtype": types_pb2.DataType.Name(tensor.dtype.as_datatype_enum),
               "tensor_shape": {"dim": [{"size": str(-1 if size is None else size)} for size in tensor.shape],
                                "unknown_rank": False}}
        for name, tensor in sorted(tensors.items())
    }


def _checked_sentences(sentences):
    if isinstance(sentences, (str, bytes)):
        raise T2TError("sentences must be a list of str, not a single string: wrap it in a list.")
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise T2TError(f"sentences[{index}] is a {type(sentence).__name__}, not a str: pass text only.")
    return sentences

