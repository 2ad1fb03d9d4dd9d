"""Continuing prompts from Python with an lm export (`continuer_module`): load, check parameters, call in batches.

    continuer = SavedModelContinuer("exports/lm")
    continuer.translate(["Der Hund"], temperature=0.8, top_k=20, seed=1)

It offers what `loaded.TranslatorBase` offers the REST server (`predict`,
`decoding_params`, `defaults`, `limits`, `outputs`, `signature_defs`), so one
server serves either kind of export.
"""

import dataclasses
import numbers
import pathlib

import tensorflow as tf

from t2t_keras.errors import T2TError
from t2t_keras.export.loaded import finite, load_saved_model, signature_defs

PARAMETER_NAMES = ("max_extra_length", "temperature", "top_k", "seed")


@dataclasses.dataclass(frozen=True)
class ContinuationParams:
    """Checked sampling parameters of one call; equal ones share a server batch."""

    max_extra_length: int  # new pieces after the prompt
    temperature: float
    top_k: int
    seed: int = -1  # < 0: a fresh random seed per call


class SavedModelContinuer:
    """Continues prompts with a continuation SavedModel; `translate` mirrors `PromptContinuer.translate`."""

    task = "lm"
    kind = "saved_model"
    parameter_names = PARAMETER_NAMES
    signature_names = ("serving_default", "continue")

    def __init__(self, path, batch_size=32, loaded=None):
        self.path = pathlib.Path(path)
        self.saved_model = loaded or load_saved_model(self.path)
        if "continue" not in self.saved_model.signatures:
            raise T2TError(f"{path} is not a continuation export (no 'continue' signature): export an lm run.")
        self.batch_size = batch_size
        self.max_length = int(self.saved_model.max_length.numpy())
        # Exports written before the setting had one name call it max_new_tokens.
        old = hasattr(self.saved_model, "default_max_new_tokens")
        self._length_name = "max_new_tokens" if old else "max_extra_length"
        self.defaults = ContinuationParams(int(getattr(self.saved_model, f"default_{self._length_name}").numpy()),
                                           float(self.saved_model.default_temperature.numpy()),
                                           int(self.saved_model.default_top_k.numpy()))

    def decoding_params(self, max_extra_length=None, temperature=None, top_k=None, seed=None):
        """`ContinuationParams`: the given values, checked, and the export's defaults for the others."""
        given = dict(max_extra_length=max_extra_length, temperature=temperature, top_k=top_k, seed=seed)
        params = dict(vars(self.defaults), **{k: v for k, v in given.items() if v is not None})
        for name in ("max_extra_length", "top_k", "seed"):
            if isinstance(params[name], bool) or not isinstance(params[name], numbers.Integral):
                raise T2TError(f"{name} must be an integer. Received: {name}={params[name]!r}")
        if isinstance(params["temperature"], bool) or not isinstance(params["temperature"], numbers.Real):
            raise T2TError(f"temperature must be a number. Received: temperature={params['temperature']!r}")
        if params["max_extra_length"] < 1 or params["temperature"] < 0 or params["top_k"] < 0:
            raise T2TError(f"Expected max_extra_length >= 1, temperature >= 0, top_k >= 0. Received: {params}")
        return ContinuationParams(int(params["max_extra_length"]), float(params["temperature"]), int(params["top_k"]),
                                  int(params["seed"]))

    def predict(self, prompts, params=None):
        """`{"continuations": [str], "scores": [float]}` for a list of prompts."""
        params = params or self.defaults
        continuations, scores = [], []
        for start in range(0, len(prompts), self.batch_size):
            out = self._call(prompts[start:start + self.batch_size], params)
            continuations += [text.decode("utf-8") for text in out["continuations"].numpy()]
            scores += [float(score) for score in out["scores"].numpy()]
        return {"continuations": continuations, "scores": scores}

    def translate(self, prompts, max_extra_length=None, temperature=None, top_k=None, seed=None):
        """The continuation of each prompt (without the prompt), in input order."""
        return self.predict(list(prompts), self.decoding_params(max_extra_length, temperature, top_k,
                                                                seed))["continuations"]

    def scorer(self):
        raise T2TError(f"{self.path} is an lm export: it continues prompts and scores no translations.")

    def limits(self):
        return {"max_length": self.max_length}

    def outputs(self, result, params):
        return {"continuations": result["continuations"], "scores": [finite(s) for s in result["scores"]]}

    def signature_defs(self):
        return signature_defs(self.saved_model)

    def _call(self, prompts, params):
        length = {self._length_name: tf.constant(params.max_extra_length, tf.int32)}
        return self.saved_model.signatures["continue"](
            inputs=tf.constant(prompts, tf.string), temperature=tf.constant(params.temperature, tf.float32),
            top_k=tf.constant(params.top_k, tf.int32), seed=tf.constant(params.seed, tf.int32), **length)
