"""Continuing lists of prompt strings with a causal language model: tokenize, batch, `continue_prompts`, detokenize."""

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.parameters import DEFAULTS
from t2t_keras.decoding.prompting import continue_prompts
from t2t_keras.families import check_searchable

GREEDY = DEFAULTS.updated(beam_size=1)  # a beam finds bland, repetitive continuations


class PromptContinuer:
    """The continuation of each prompt string (without the prompt), as `Translator.translate` gives translations.

    Args:
        model: a built `CausalLanguageModel`.
        tokenizer: as for `Translator`.
        params: `DecodingParams`: a beam size of 1 is greedy search (argmax, or sampling when `temperature`
            > 0, among the `top_k` most likely tokens; 0 = all), more a beam search with `alpha`;
            a continuation stops after `max_extra_length` pieces (EOS included).
        temperature, top_k, seed: sampling options (greedy search only).
        batch_size: prompts decoded together.
    """

    def __init__(self, model, tokenizer, params=GREEDY, temperature=0.0, top_k=0, seed=None, batch_size=32):
        self.model, self.tokenizer, self.params = check_searchable(model), tokenizer, params
        self.temperature, self.top_k = temperature, top_k
        self.seed, self.batch_size = seed, batch_size
        if temperature < 0 or top_k < 0:
            raise ValueError(f"temperature and top_k must be >= 0. Received: temperature={temperature}, "
                             f"top_k={top_k}")

    def translate(self, prompts):
        """Continuations of `prompts` (a list of str), in the same order; an empty prompt continues BOS alone."""
        prompts = list(prompts)
        out = []
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self._continue(prompts[start:start + self.batch_size]))
        return out

    def _continue(self, prompts):
        if not prompts:
            return []
        pieces = self.tokenizer.tokenize(tf.constant(prompts, tf.string))
        params = self.params
        longest = max(1, self.model.max_length - params.max_extra_length - 1)  # room for BOS and the continuation
        rows = [ids[-longest:] for ids in np.split(pieces.flat_values.numpy(), pieces.row_splits.numpy()[1:-1])]
        width = max(1, max(len(ids) for ids in rows))
        batch = np.zeros((len(rows), width), np.int32)
        for row, ids in zip(batch, rows):
            row[:len(ids)] = ids
        out = continue_prompts(self.model, batch, max_extra_length=params.max_extra_length, method=params.method,
                               beam_size=params.beam_size, alpha=params.alpha, temperature=self.temperature,
                               top_k=self.top_k, seed=self.seed)
        return [text.decode("utf-8") for text in self.tokenizer.detokenize(out["tokens"]).numpy()]
