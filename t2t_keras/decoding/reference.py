"""Uncached reference decoders: every step re-runs `model.decode` on the whole prefix.

Slow and plain (eager calls, Python loops over steps and hypotheses, NumPy
bookkeeping), they spell out the algorithms that the cached, compiled decoders
in `greedy` and `beam_search` must reproduce, with the same conventions
(length limits, EOS, scores; see `common` and `beam_search`). The beam search
here stops a sentence once `stopping.finished_enough(beam_size)` hypotheses have finished (`stopping="beam"`)
and otherwise ("exact") never stops early: it runs every sentence to its length limit, which
checks that the exact early stop of the cached search changes nothing.
"""

import numpy as np

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.stopping import finished_enough
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID


def reference_greedy(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None, min_length=0):
    """Argmax decoding without a cache; same arguments and results as `greedy_decode`."""
    source = np.asarray(source, np.int32)
    bound, limits = _limits(model, source, max_extra_length, max_length)
    memory, mask = model.encode(source, training=False), model.source_mask(source)
    batch = len(source)
    tokens = np.zeros((batch, bound), np.int32)
    scores = np.zeros(batch)
    finished = np.zeros(batch, bool)
    for step in range(bound):
        if finished.all():
            break
        prefixes = np.concatenate([np.full((batch, 1), BOS_ID, np.int32), tokens[:, :step]], axis=1)
        log_probs = _last_log_probs(model, prefixes, memory, mask, step, min_length)
        for row in np.flatnonzero(~finished):
            token = int(np.argmax(log_probs[row]))
            tokens[row, step] = token
            scores[row] += log_probs[row, token]
            finished[row] = token == EOS_ID or step + 1 >= limits[row]
    return {"tokens": tokens, "scores": scores.astype(np.float32)}


def reference_beam_search(model, source, beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha,
                          length_penalty=DEFAULTS.length_penalty, max_extra_length=DEFAULTS.max_extra_length,
                          max_length=None, min_length=0, num_return=1, stopping=DecodingConfig.stopping):
    """Beam search without a cache, one sentence at a time; same arguments and results as `beam_search`."""
    source = np.asarray(source, np.int32)
    bound, limits = _limits(model, source, max_extra_length, max_length)
    memory, mask = model.encode(source, training=False), model.source_mask(source)

    def score(log_prob, length):
        return log_prob / _penalty(length, alpha, length_penalty)

    batch = len(source)
    tokens = np.zeros((batch, num_return, bound), np.int32)
    scores = np.full((batch, num_return), -np.inf, np.float32)
    log_probs = np.full((batch, num_return), -np.inf, np.float32)
    for row in range(batch):
        finished = _search_sentence(model, memory[row:row + 1], mask[row:row + 1], int(limits[row]), beam_size,
                                    score, min_length, stopping)
        for rank, (hypothesis, log_prob, value) in enumerate(finished[:num_return]):
            tokens[row, rank, :len(hypothesis)] = hypothesis
            scores[row, rank], log_probs[row, rank] = value, log_prob
    return {"tokens": tokens, "scores": scores, "log_probs": log_probs}


def _search_sentence(model, memory, mask, limit, beam_size, score, min_length, stopping):
    """Finished `(tokens, log_prob, score)` hypotheses of one sentence, best first."""
    alive, finished, ended = [((), 0.0)], [], 0
    for step in range(limit):
        if stopping == "beam" and ended >= finished_enough(beam_size):
            break
        count = len(alive)
        prefixes = np.array([(BOS_ID,) + hypothesis for hypothesis, _ in alive], np.int32)
        step_log_probs = _last_log_probs(model, prefixes, np.repeat(memory, count, 0), np.repeat(mask, count, 0),
                                         step, min_length)
        totals = np.array([log_prob for _, log_prob in alive])[:, None] + step_log_probs  # (count, vocab)
        vocab = totals.shape[1]
        best = np.argsort(-totals.ravel(), kind="stable")[:2 * beam_size]
        next_alive = []
        for rank, index in enumerate(best):
            hypothesis = alive[index // vocab][0] + (int(index % vocab),)
            log_prob = float(totals.flat[index])
            if hypothesis[-1] == EOS_ID or step + 1 == limit:
                if rank < beam_size:  # only a candidate that takes a beam slot may finish
                    finished.append((hypothesis, log_prob, score(log_prob, len(hypothesis))))
                    ended += 1
            else:
                next_alive.append((hypothesis, log_prob))
        finished = sorted(finished, key=lambda item: -item[2])[:beam_size]  # stable: older first on ties
        alive = next_alive[:beam_size]
    return finished


def _limits(model, source, max_extra_length, max_length):
    """The buffer size and each sentence's output limit, as in `common`."""
    width = source.shape[1]
    bound = width + max_extra_length if max_length is None else max_length
    bound = max(1, min(bound, model.max_length))
    lengths = (source != PAD_ID).sum(axis=1)
    return bound, np.clip(lengths + max_extra_length, 1, bound)


def _last_log_probs(model, prefixes, memory, mask, step, min_length):
    """float64 log-probabilities of the token after each full prefix; PAD, BOS (and early EOS) at -inf."""
    logits = np.asarray(model.decode(prefixes, memory, mask, training=False)[:, -1], np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_probs[:, [PAD_ID, BOS_ID]] = -np.inf
    if step + 1 < min_length:
        log_probs[:, EOS_ID] = -np.inf
    return log_probs


def _penalty(length, alpha, kind):
    """lp(Y) of `length_penalty`, in NumPy."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "average":
        return float(length)
    return 1.0
