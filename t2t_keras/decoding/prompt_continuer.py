"""Continuing lists of prompt strings with a causal language model: tokenize, batch, `continue_prompts`, detokenize."""

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.parameters import check_beam_size, check_method
from t2t_keras.decoding.prompting import continue_prompts


class PromptContinuer:
    """The continuation of each prompt string (without the prompt), as `Translator.translate` gives translations.

    Args:
        model: a built `CausalLanguageModel`.
        tokenizer: as for `Translator`.
        method: "greedy" (argmax, or sampling when `temperature` > 0, among
            the `top_k` most likely tokens; 0 = all) or "beam".
        beam_size, alpha: beam-search options.
        max_new_tokens: a continuation stops after this many pieces (EOS included).
        temperature, top_k, seed: sampling options (greedy method only).
        batch_size: prompts decoded together.
    """

    def __init__(self, model, tokenizer, method="greedy", beam_size=4, alpha=0.6, max_new_tokens=50,
                 temperature=0.0, top_k=0, seed=None, batch_size=32):
        check_method(method)
        self.model, self.tokenizer = model, tokenizer
        self.method, self.beam_size, self.alpha = method, check_beam_size(beam_size), alpha
        self.max_new_tokens, self.temperature, self.top_k = max_new_tokens, temperature, top_k
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
        longest = max(1, self.model.max_length - self.max_new_tokens - 1)  # room for BOS and the continuation
        rows = [ids[-longest:] for ids in np.split(pieces.flat_values.numpy(), pieces.row_splits.numpy()[1:-1])]
        width = max(1, max(len(ids) for ids in rows))
        batch = np.zeros((len(rows), width), np.int32)
        for row, ids in zip(batch, rows):
            row[:len(ids)] = ids
        out = continue_prompts(self.model, batch, max_new_tokens=self.max_new_tokens, method=self.method,
                               beam_size=self.beam_size, alpha=self.alpha, temperature=self.temperature,
                               top_k=self.top_k, seed=self.seed)
        return [text.decode("utf-8") for text in self.tokenizer.detokenize(out["tokens"]).numpy()]
