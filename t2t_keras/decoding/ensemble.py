"""Several translation models searched as one: at each step, the average of their log-probabilities.

    ensemble = Ensemble([model_a, model_b])           # Transformers sharing one vocabulary
    beam_search(ensemble, source, beam_size=4)        # or greedy_decode, or Generator(ensemble, tokenizer)

`Ensemble` is `Searchable` (`families.py`), so the greedy and beam searches run it unchanged: each member encodes
the source once and keeps its own key/value cache, and each step feeds the same previous tokens to every member.
The step's logits are the mean of the members' log-softmax outputs; the searches' own log-softmax then normalises
them, so a step's distribution is the normalised geometric mean of the members' distributions,
`p(y) ∝ (Π_m p_m(y))^(1/M)` (log-linear interpolation with equal weights, as Sockeye's `log_linear` ensembles).
Within one step the ranking of the next tokens is that of the plain mean (the normalisation subtracts one
constant); across hypotheses it keeps the scores log-probabilities, as the length penalty and the early stop of the
beam search expect. An ensemble of a model with
itself finds that model's tokens (its scores differ by float rounding: the normalisation is applied twice).

The cache is the members' caches one after the other: a list with one entry per decoder layer of each member, so
the beam search reorders it like a single model's.
"""

import tensorflow as tf

from t2t_keras.families import check_searchable
from t2t_keras.model import StepOutput


class Ensemble:
    """Models that decode together, their log-probabilities averaged at each step.

    Args:
        models: one or more built encoder-decoder models (`Transformer`) with the same vocabulary size and special
            ids; the shortest `max_length` bounds the outputs.
    """

    def __init__(self, models):
        self.models = tuple(check_searchable(model) for model in models)
        if not self.models:
            raise ValueError("An ensemble needs at least one model. Received: models=[]")
        first = self.models[0]
        for model in self.models[1:]:
            if (model.vocab_size, _ids(model)) != (first.vocab_size, _ids(first)):
                raise ValueError("The models of an ensemble must share one vocabulary. Received: vocabulary sizes "
                                 f"{[m.vocab_size for m in self.models]}, special ids "
                                 f"{[_ids(m) for m in self.models]}")
        self.vocab_size, self.pad_id, self.special_ids = first.vocab_size, first.pad_id, _ids(first)
        self.max_length = min(model.max_length for model in self.models)
        # How many cache entries (decoder layers) each member's cache holds, to split the joint cache.
        self._cache_sizes = tuple(model.decoder.num_layers for model in self.models)

    def source_mask(self, source):
        return self.models[0].source_mask(source)  # every member pads with the same id

    def encode(self, source, training=None):
        """Each member's encoder output, in order: a tuple of `(batch, source_len, hidden_dim)` tensors."""
        return tuple(model.encode(source, training=training) for model in self.models)

    def init_cache(self, memory, max_length):
        """The members' decoder caches (from `encode`'s tuple), one after the other in one list."""
        return [layer for model, own in zip(self.models, memory) for layer in model.init_cache(own, max_length)]

    def decode_step(self, tokens, cache, step, source_mask=None, training=False, growing=False):
        """Every member's step on the same `tokens`; `StepOutput` whose float32 logits `(batch, step_len, vocab)`
        are the mean of the members' log-probabilities, with the joint cache and every member's cross-attention
        weights (one entry per layer of each member, as the cache)."""
        log_probs, caches, cross_weights = [], [], []
        for model, own in zip(self.models, self._split(cache)):
            out = model.decode_step(tokens, own, step, source_mask, training=training, growing=growing)
            log_probs.append(tf.nn.log_softmax(out.logits))
            caches += out.cache
            cross_weights += out.cross_weights
        return StepOutput(tf.add_n(log_probs) / len(log_probs), caches, cross_weights)

    def _split(self, cache):
        """The joint cache cut back into each member's list of layers."""
        ends = [sum(self._cache_sizes[:i + 1]) for i in range(len(self._cache_sizes))]
        return [cache[end - size:end] for size, end in zip(self._cache_sizes, ends)]


def _ids(model):
    """A member's special ids (`Transformer.special_ids`; None: the package's fixed ones)."""
    return getattr(model, "special_ids", None)
