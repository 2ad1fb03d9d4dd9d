"""Uncached reference decoders: every step re-runs `model.decode` on the whole prefix.

Slow and plain (eager calls, Python loops over steps and hypotheses, NumPy
bookkeeping), they spell out the algorithms that the cached, compiled decoders
in `greedy` and `beam_search` must reproduce, with the same conventions
(length limits, the model's own ids, EOS, scores; see `common` and `beam_search`). The beam search
here stops a sentence once `stopping.finished_enough(beam_size)` hypotheses have finished (`stopping="beam"`),
by Hugging Face's rules for the `"transformers"` ones (`stopping`), and otherwise ("exact") never stops early: it
runs every sentence to its length limit, which checks that the exact early stop of the cached search changes
nothing.
"""

import numpy as np

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding.common import search_ids
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.stopping import finished_enough


def reference_greedy(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None, min_length=0,
                     max_output_length=None, end_at_limit=False):
    """Argmax decoding without a cache; same arguments and results as `greedy_decode`."""
    ids = search_ids(model)
    source = np.asarray(source, np.int32)
    bound, limits = _limits(model, source, max_extra_length, max_length, max_output_length, ids.pad)
    memory, mask = model.encode(source, training=False), model.source_mask(source)
    batch = len(source)
    tokens = np.full((batch, bound), ids.pad, np.int32)
    scores = np.zeros(batch)
    finished = np.zeros(batch, bool)
    for step in range(bound):
        if finished.all():
            break
        prefixes = np.concatenate([np.full((batch, 1), ids.start, np.int32), tokens[:, :step]], axis=1)
        log_probs = _last_log_probs(model, prefixes, memory, mask, step, min_length, ids)
        for row in np.flatnonzero(~finished):
            row_log_probs = _ended(log_probs[row], ids) if end_at_limit and step + 1 >= limits[row] else log_probs[row]
            token = int(np.argmax(row_log_probs))
            tokens[row, step] = token
            scores[row] += row_log_probs[token]
            finished[row] = token == ids.end or step + 1 >= limits[row]
    return {"tokens": tokens, "scores": scores.astype(np.float32)}


def reference_beam_search(model, source, beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha,
                          length_penalty=DEFAULTS.length_penalty, max_extra_length=DEFAULTS.max_extra_length,
                          max_length=None, min_length=0, num_return=1, stopping=DecodingConfig.stopping,
                          max_output_length=None, end_at_limit=False):
    """Beam search without a cache, one sentence at a time; same arguments and results as `beam_search`."""
    ids = search_ids(model)
    source = np.asarray(source, np.int32)
    bound, limits = _limits(model, source, max_extra_length, max_length, max_output_length, ids.pad)
    memory, mask = model.encode(source, training=False), model.source_mask(source)

    def score(log_prob, length):
        return log_prob / _penalty(length, alpha, length_penalty)

    batch = len(source)
    tokens = np.full((batch, num_return, bound), ids.pad, np.int32)
    scores = np.full((batch, num_return), -np.inf, np.float32)
    log_probs = np.full((batch, num_return), -np.inf, np.float32)
    for row in range(batch):
        sentence = _Sentence(model, memory[row:row + 1], mask[row:row + 1], int(limits[row]), ids, min_length,
                             end_at_limit)
        finished = sentence.search(beam_size, score, stopping)
        for rank, (hypothesis, log_prob, value) in enumerate(finished[:num_return]):
            tokens[row, rank, :len(hypothesis)] = hypothesis
            scores[row, rank], log_probs[row, rank] = value, log_prob
    return {"tokens": tokens, "scores": scores, "log_probs": log_probs}


class _Sentence:
    """One sentence's beam search (`search`), its decoder re-run on every full prefix."""

    def __init__(self, model, memory, mask, limit, ids, min_length, end_at_limit):
        self.model, self.memory, self.mask, self.limit, self.ids = model, memory, mask, limit, ids
        self.min_length, self.end_at_limit = min_length, end_at_limit

    def search(self, beam_size, score, stopping):
        """Finished `(tokens, log_prob, score)` hypotheses, best first."""
        alive, finished, ended = [((), 0.0)], [], 0
        for step in range(self.limit):
            if _settled(stopping, ended, finished, alive, step, self.limit, beam_size, score):
                break
            totals = self._totals(alive, step)  # (count, vocab)
            vocab = totals.shape[1]
            next_alive = []
            for rank, index in enumerate(np.argsort(-totals.ravel(), kind="stable")[:2 * beam_size]):
                hypothesis = alive[index // vocab][0] + (int(index % vocab),)
                log_prob = float(totals.flat[index])
                if hypothesis[-1] == self.ids.end or step + 1 == self.limit:
                    if rank < beam_size:  # only a candidate that takes a beam slot may finish
                        finished.append((hypothesis, log_prob, score(log_prob, len(hypothesis))))
                        ended += 1
                else:
                    next_alive.append((hypothesis, log_prob))
            finished = sorted(finished, key=lambda item: -item[2])[:beam_size]  # stable: older first on ties
            alive = next_alive[:beam_size]
        return finished

    def _totals(self, alive, step):
        """Each alive hypothesis's log-probability plus that of every next token."""
        count = len(alive)
        prefixes = np.array([(self.ids.start,) + hypothesis for hypothesis, _ in alive], np.int32)
        step_log_probs = _last_log_probs(self.model, prefixes, np.repeat(self.memory, count, 0),
                                         np.repeat(self.mask, count, 0), step, self.min_length, self.ids)
        if self.end_at_limit and step + 1 >= self.limit:
            step_log_probs = np.stack([_ended(row, self.ids) for row in step_log_probs])
        return np.array([log_prob for _, log_prob in alive])[:, None] + step_log_probs


def _settled(stopping, ended, finished, alive, step, limit, beam_size, score):
    """Whether `stopping` is done with a sentence before `step` (its state after the step before)."""
    if stopping == "beam":
        return ended >= finished_enough(beam_size)
    if not stopping.startswith("transformers") or len(finished) < beam_size or finished[-1][2] == -np.inf:
        return False
    best = max(log_prob for _, log_prob in alive) if alive else -np.inf
    reach = score(best, step) if stopping == "transformers" else max(score(best, step), score(best, limit))
    return stopping == "transformers_early" or reach <= finished[-1][2]


def _limits(model, source, max_extra_length, max_length, max_output_length, pad):
    """The buffer size and each sentence's output limit, as in `common`."""
    width = source.shape[1]
    bound = width + max_extra_length if max_length is None else max_length
    longest = model.max_length if max_output_length is None else min(max_output_length, model.max_length)
    bound = max(1, min(bound, longest))
    lengths = (source != pad).sum(axis=1)
    return bound, np.clip(lengths + max_extra_length, 1, bound)


def _last_log_probs(model, prefixes, memory, mask, step, min_length, ids):
    """float64 log-probabilities of the token after each full prefix; PAD, the start id (unless it is the end id)
    and an early end at -inf."""
    logits = np.asarray(model.decode(prefixes, memory, mask, training=False)[:, -1], np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_probs[:, ids.pad] = -np.inf
    if ids.start != ids.end:
        log_probs[:, ids.start] = -np.inf
    if step + 1 < min_length:
        log_probs[:, ids.end] = -np.inf
    return log_probs


def _ended(log_probs, ids):
    """A row of log-probabilities where only the end id may come, with log-probability 0 (`end_at_limit`)."""
    only = np.full_like(log_probs, -np.inf)
    only[ids.end] = 0.0
    return only


def _penalty(length, alpha, kind):
    """lp(Y) of `length_penalty`, in NumPy."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "power":
        return float(length) ** alpha
    if kind == "average":
        return float(length)
    return 1.0
