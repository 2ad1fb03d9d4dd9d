"""A causal language model as a SavedModel: prompt strings in, continuation strings out.

Signatures (text only; the tokenizer is a TF-Text resource):

* `serving_default(inputs)`: `(N,)` strings -> `continuations` `(N,)`
  strings and `scores` (log-probability of each continuation), with the
  export's defaults (`default_max_extra_length`, `default_temperature`,
  `default_top_k`; a fresh random seed per call).
* `continue(inputs, max_extra_length, temperature, top_k, seed)`: the same with
  every sampling parameter given per call: `temperature` 0 is greedy argmax,
  above 0 samples among the `top_k` most likely pieces (0: all); `seed` >= 0
  makes the draw repeatable, a negative seed draws a fresh one.

A prompt keeps its last `max_length - 1 - max_extra_length` pieces (room for BOS
and the continuation); `max_extra_length` is cut to `max_length - 2`.
"""

import tensorflow as tf

from t2t_keras.decoding.prompting import continue_prompts
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.sampling import random_seed
from t2t_keras.export.signature_functions import SignatureFunctions, function, scalar_specs
from t2t_keras.export.translator_module import STRINGS_SPEC
from t2t_keras.special_ids import PAD_ID

PARAMETER_SPECS = scalar_specs(max_extra_length=tf.int32, temperature=tf.float32, top_k=tf.int32, seed=tf.int32)


class ContinuerModule(tf.Module):
    """Tokenizer + `CausalLanguageModel` + sampling; exported functions `serve` and `continue_text`.

    Args:
        model: a built `CausalLanguageModel`.
        tokenizer: its `data.tokenizer.Tokenizer`.
        max_extra_length, temperature, top_k: the defaults of `serving_default`.
    """

    def __init__(self, model, tokenizer, max_extra_length=DEFAULTS.max_extra_length, temperature=0.0, top_k=0,
                 name=None):
        super().__init__(name=name)
        if max_extra_length < 1 or temperature < 0 or top_k < 0:
            raise ValueError(f"Expected max_extra_length >= 1, temperature >= 0 and top_k >= 0. Received: "
                             f"max_extra_length={max_extra_length}, temperature={temperature}, top_k={top_k}")
        self.model = model
        self.tokenizer = tokenizer
        self.task = tf.Variable("lm", trainable=False, name="task")  # tells a loader what the export does
        self.max_length = tf.Variable(model.max_length, trainable=False, name="max_length")
        self.default_max_extra_length = tf.Variable(max_extra_length, trainable=False, name="default_max_extra_length")
        self.default_temperature = tf.Variable(float(temperature), trainable=False, name="default_temperature")
        self.default_top_k = tf.Variable(top_k, trainable=False, name="default_top_k")
        self.functions = SignatureFunctions()  # saved only as signatures (`export.signature_functions`)
        self.functions.continue_text = function(self._continue, (STRINGS_SPEC,) + PARAMETER_SPECS)
        self.functions.serve = function(self._serve, (STRINGS_SPEC,))

    def signatures(self):
        return {"serving_default": self.functions.serve.get_concrete_function(),
                "continue": self.functions.continue_text.get_concrete_function()}

    def _continue(self, inputs, max_extra_length, temperature, top_k, seed):
        checks = [tf.debugging.assert_non_negative(temperature, message="temperature must be >= 0"),
                  tf.debugging.assert_non_negative(top_k, message="top_k must be >= 0"),
                  tf.debugging.assert_positive(max_extra_length, message="max_extra_length must be >= 1")]
        with tf.control_dependencies(checks):
            max_extra_length = tf.minimum(max_extra_length, self.model.max_length - 2)
        keep = self.model.max_length - 1 - max_extra_length
        pieces = self.tokenizer.tokenize(inputs)
        start = tf.maximum(pieces.row_lengths() - tf.cast(keep, tf.int64), 0)
        kept = tf.ragged.range(start, pieces.row_lengths())
        prompts = tf.gather(pieces, kept, batch_dims=1).to_tensor(default_value=PAD_ID)
        prompts = tf.minimum(tf.cast(prompts, tf.int32), self.model.vocab_size - 1)
        seed = tf.where(seed >= 0, seed, random_seed())
        out = continue_prompts(self.model, prompts, max_extra_length=max_extra_length, temperature=temperature,
                               top_k=top_k, seed=seed, max_length=self.model.max_length)
        return {"continuations": self.tokenizer.detokenize(out["tokens"]), "scores": out["scores"]}

    def _serve(self, inputs):
        return self.functions.continue_text(inputs, self.default_max_extra_length.read_value(),
                                  self.default_temperature.read_value(), self.default_top_k.read_value(),
                                  tf.constant(-1))
