"""Lexically constrained beam search: dynamic beam allocation (Post & Vilar 2018) over fixed shapes.

Each sentence comes with *constraints*: target token sequences (terms) that must appear in its output, each as
a contiguous run of tokens, in any order. They travel as int `(batch, max_constraints, max_constraint_len)`,
padded with the model's padding id; an all-padding row is no constraint.

The search is `beam_search`'s (alive and finished sets, beams flattened into the batch, one `tf.while_loop` over
fixed-shape tensors, XLA-compilable), with these changes:

* Each hypothesis tracks which constraints it has *met* and its *progress* inside the one it is *in* (Post &
  Vilar's state). A token that continues that constraint advances it; any other token resets the progress to 0
  (a phrase must be produced contiguously), and with no progress, a token that is the first of an unmet
  constraint starts it. Its *bank* is the number of constraint tokens it holds: the met constraints' lengths
  plus its progress.
* Candidates of a step: `beam_search`'s `2 * beam` most likely extensions, plus for each alive hypothesis its own
  best extension and the next token of each constraint it can advance (the one it is in; with no progress, each
  unmet one). A hypothesis extended by the same token twice counts once.
* EOS is forbidden to a hypothesis that has not met every constraint; only complete hypotheses join `finished`,
  and one that reaches its length limit incomplete is dropped.
* Beam slots are dealt round-robin over the banks: candidates are ordered by their rank within their bank (by
  log-probability), then by bank, highest first. Each non-empty bank's best comes first, then each one's second,
  and so on: Post & Vilar's equal allocation of the beam to the banks, a bank with too few candidates leaving
  its slots to the others, in one sort instead of per-bank quotas. The first `beam` candidates take the slots
  (the complete ones among them that end join `finished`, as in `beam_search`); the first `beam` that do not
  end are the new alive set.

Why every constraint appears: the first candidate in that order is the best of the highest bank. The alive
hypothesis with the most constraint tokens, B of the sentence's T, has a candidate in bank B + 1 (the token that
advances a constraint), so the alive set's highest bank grows by one each step until a hypothesis is complete;
a complete one keeps a candidate in bank T (its best extension), which takes the first slot and, when it ends
(EOS, or the length limit), joins `finished`. So when the T constraint tokens fit in the sentence's length limit
(`constraint_room`), the search returns a hypothesis holding every constraint. When they do not (or the model
gives a constraint token probability 0), no hypothesis is complete: `satisfied` is false for that sentence, its
tokens are not to be used, and the caller reports that sentence alone.

Without constraints (every row of a sentence padding) there is one bank, the order is that of the
log-probabilities, the extra candidates rank below `beam_search`'s `2 * beam` (they were not among the most
likely) and nothing is forbidden: the tokens, scores and log-probabilities are exactly `beam_search`'s.

Constraint tokens are scored with the model's log-probabilities, like any other, so forced decoding
(`decoding.forced`, the `score` command) of a constrained output gives its `log_probs`. Shortlists are not
combined with constraints; a forced prefix (a multilingual model's target language) is.
"""

from typing import NamedTuple

import tensorflow as tf

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding import common
from t2t_keras.decoding.beams import BeamRule, Choice, beam_search, top_candidates
from t2t_keras.decoding.request import DEFAULTS


class Constraints(NamedTuple):
    """A batch's constraints: `ids` int32 `(batch, C, L)` padded with `pad`, `lengths` `(batch, C)` (0: no
    constraint)."""

    ids: tf.Tensor
    lengths: tf.Tensor
    pad: int

    @classmethod
    def of(cls, ids, pad):
        ids = tf.convert_to_tensor(ids, tf.int32)
        return cls(ids, tf.reduce_sum(tf.cast(tf.not_equal(ids, pad), tf.int32), axis=-1), pad)

    @property
    def total(self):
        """`(batch,)` number of constraint tokens of each sentence."""
        return tf.reduce_sum(self.lengths, axis=-1)


def constraint_room(lengths, source_lengths, max_extra_length, model_max_length):
    """Python check: whether constraints of `lengths` (token counts) fit in a sentence's output limit.

    `source_lengths`: the source's ids, EOS included. The limit is `common.output_limits`'s (the buffers of a
    translator's batch are never shorter). Returns `(fits, limit)`.
    """
    limit = max(1, min(source_lengths + max_extra_length, model_max_length))
    return sum(lengths) <= limit, limit


def constrained_beam_search(model, source, constraints, beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha,
                            length_penalty=DEFAULTS.length_penalty, max_extra_length=DEFAULTS.max_extra_length,
                            max_length=None, min_length=0, num_return=1, stopping=DecodingConfig.stopping,
                            growing_cache=False, **options):
    """The `num_return` best translations of each source sentence that hold every one of its constraints.

    Args:
        model: a built `Transformer` (or an `Ensemble`).
        source: int `(batch, source_len)` ids, padded, each row ending with EOS.
        constraints: int `(batch, max_constraints, max_constraint_len)` target ids of each sentence's
            constraints, padded with the model's padding id (no start, end or padding id inside a constraint).
        The other arguments (and `options`: `forced_prefix`, `max_output_length`, `end_at_limit`) are
        `beam_search`'s.

    Returns:
        `beam_search`'s dict (`tokens`, `scores`, `log_probs`) and `satisfied`: bool `(batch,)`, false for a
        sentence no complete hypothesis was found for (its constraints do not fit in its length limit): its
        tokens are then not a translation, and its scores -inf. Scores of n-best entries beyond the complete
        hypotheses found are -inf as well.
    """
    out = beam_search(model, source, beam_size=beam_size, alpha=alpha, length_penalty=length_penalty,
                      max_extra_length=max_extra_length, max_length=max_length, min_length=min_length,
                      num_return=num_return, stopping=stopping, growing_cache=growing_cache,
                      rule=ConstraintRule(Constraints.of(constraints, common.search_ids(model).pad)), **options)
    return {**out, "satisfied": out["log_probs"][:, 0] > common.NEG_INF}


class ConstraintRule(BeamRule):
    """`beam_search`'s choice of candidates under a batch's `Constraints` (see the module docstring)."""

    state_names = ("met", "progress", "current")
    compacts = False  # the constraints are rows of the batch, which the search keeps whole

    def __init__(self, terms):
        self.terms = terms

    def initial_state(self, batch, beam_size):
        """Every hypothesis has met the padding constraints only, and is in none."""
        met = tf.tile(tf.equal(self.terms.lengths, 0)[:, None, :], [1, beam_size, 1])  # (batch, beam, C)
        zeros = tf.zeros((batch, beam_size), tf.int32)
        return {"met": met, "progress": zeros, "current": zeros}

    def choose(self, state, log_probs, step, limits, ids, output_ids=None):
        """Constraint candidates included, in slot order; only complete hypotheses may join `finished`."""
        log_probs = _forbid_incomplete_end(log_probs, state, ids.end)
        candidates = _candidates(state, log_probs, self.terms, step)
        candidates["ending"] = tf.equal(candidates["tokens"], ids.end) | (step + 1 >= limits[:, None])
        selected = _slot_order(candidates, self.terms, state["alive_seq"], step)  # (batch, 2 * beam), slots first
        complete = tf.reduce_all(selected["met"], axis=-1)
        return Choice(selected, selected["ending"] & complete & selected["valid"], _next_alive(selected))


def _forbid_incomplete_end(log_probs, state, end_id):
    """The end id gets -inf for the hypotheses (rows of `log_probs`, `(batch * beam, vocab)`) with an unmet
    constraint."""
    incomplete = tf.reshape(tf.logical_not(tf.reduce_all(state["met"], axis=-1)), (-1, 1))
    end = tf.equal(tf.range(tf.shape(log_probs)[-1]), end_id)[None, :]
    return tf.where(incomplete & end, tf.constant(common.NEG_INF, log_probs.dtype), log_probs)


def _candidates(state, log_probs, terms, step):
    """Every candidate of the step, `(batch, N)` each: `beams`, `tokens`, `log_probs`, `valid`, and its state.

    N = 2 * beam (the most likely) + beam (each hypothesis's best) + beam * C (the constraint tokens).
    """
    alive_log_probs = state["alive_log_probs"]
    batch, beam_size = tf.shape(alive_log_probs)[0], common.dim(alive_log_probs, 1)
    top = top_candidates(state["alive_seq"], alive_log_probs, log_probs, step)
    per_beam = tf.reshape(log_probs, (batch, beam_size, -1))  # (batch, beam, vocab)
    own_best = tf.argmax(per_beam, axis=-1, output_type=tf.int32)  # (batch, beam)
    forced, allowed = _constraint_tokens(terms, state)  # (batch, beam, C)
    count = tf.shape(forced)[-1]
    beams = tf.range(beam_size)[None, :]
    extra_beams = tf.concat([tf.tile(beams, (batch, 1)), tf.repeat(tf.tile(beams, (batch, 1)), count, axis=1)], 1)
    extra_tokens = tf.concat([own_best, tf.reshape(forced, (batch, -1))], axis=1)
    extra_log_probs = tf.gather(alive_log_probs, extra_beams, batch_dims=1) + tf.gather(
        tf.reshape(per_beam, (batch, -1)), extra_beams * tf.shape(per_beam)[-1] + extra_tokens, batch_dims=1)
    allowed = tf.concat([tf.ones((batch, 2 * beam_size + beam_size), tf.bool), tf.reshape(allowed, (batch, -1))], 1)
    candidates = {"beams": tf.concat([top["beams"], extra_beams], axis=1),
                  "tokens": tf.concat([top["tokens"], extra_tokens], axis=1),
                  "log_probs": tf.concat([top["log_probs"], extra_log_probs], axis=1)}
    candidates["valid"] = allowed & (candidates["log_probs"] > common.NEG_INF) & ~_repeated(candidates)
    parents = {key: tf.gather(state[key], candidates["beams"], batch_dims=1) for key in ("met", "progress", "current")}
    return {**candidates, **_advance(terms, parents, candidates["tokens"])}


def _constraint_tokens(terms, state):
    """`(batch, beam, C)` next token of each constraint of each hypothesis, and whether it may come next.

    A hypothesis in a constraint may only continue it; one in none may start any unmet constraint.
    """
    progress = state["progress"][..., None]  # (batch, beam, 1)
    count, width = tf.shape(terms.ids)[1], tf.shape(terms.ids)[2]
    in_current = tf.equal(tf.range(count), state["current"][..., None])  # (batch, beam, C)
    position = tf.where(in_current, progress, 0)
    tokens = tf.reduce_sum(terms.ids[:, None] * tf.one_hot(position, width, dtype=tf.int32), axis=-1)
    allowed = tf.where(progress > 0, in_current, tf.logical_not(state["met"]))
    allowed &= terms.lengths[:, None, :] > 0
    return tf.where(allowed, tokens, terms.pad), allowed


def _repeated(candidates):
    """bool `(batch, N)`: the candidates that extend the same hypothesis by the same token as an earlier one."""
    key = candidates["beams"] * (tf.reduce_max(candidates["tokens"]) + 1) + candidates["tokens"]
    count = tf.shape(key)[1]
    earlier = tf.range(count)[None, :] < tf.range(count)[:, None]  # [i, j]: j before i
    return tf.reduce_any(tf.equal(key[:, :, None], key[:, None, :]) & earlier[None], axis=-1)


def _advance(terms, parents, tokens):
    """The constraint state (`met`, `progress`, `current`) of hypotheses in state `parents` extended by `tokens`."""
    met, progress, current = parents["met"], parents["progress"], parents["current"]  # (batch, N, C), (batch, N)
    count, width = tf.shape(terms.ids)[1], tf.shape(terms.ids)[2]
    current_ids = tf.gather(terms.ids, current, batch_dims=1)  # (batch, N, L)
    expected = tf.reduce_sum(current_ids * tf.one_hot(tf.minimum(progress, width - 1), width, dtype=tf.int32), -1)
    continues = (progress > 0) & tf.equal(tokens, expected)
    starts = tf.logical_not(met) & tf.equal(terms.ids[:, None, :, 0], tokens[..., None])  # (batch, N, C)
    started = tf.argmax(tf.cast(starts, tf.int32), axis=-1, output_type=tf.int32)  # the first one
    current = tf.where(continues, current, started)
    progress = tf.where(continues, progress + 1, tf.where(tf.reduce_any(starts, axis=-1), 1, 0))
    completes = (progress > 0) & (progress >= tf.gather(terms.lengths, current, batch_dims=1))
    met |= completes[..., None] & tf.equal(tf.range(count), current[..., None])
    return {"met": met, "progress": tf.where(completes, 0, progress), "current": current}


def _slot_order(candidates, terms, alive_seq, step):
    """The first `2 * beam` candidates in slot order (round-robin over banks, see the module docstring), with
    their sequences."""
    valid, log_probs = candidates["valid"], candidates["log_probs"]
    bank = tf.reduce_sum(tf.cast(candidates["met"], tf.int32) * terms.lengths[:, None, :], -1) + candidates["progress"]
    count = tf.shape(bank)[1]
    index = tf.range(count)
    ahead = (log_probs[:, None, :] > log_probs[:, :, None]) | (  # [i, j]: j ranks before i in its bank
        tf.equal(log_probs[:, None, :], log_probs[:, :, None]) & (index[None, :] < index[:, None])[None])
    ahead &= tf.equal(bank[:, None, :], bank[:, :, None]) & valid[:, None, :]
    rank = tf.where(valid, tf.reduce_sum(tf.cast(ahead, tf.int32), axis=-1), count)
    banks = tf.reduce_max(tf.concat([terms.total, [0]], axis=0)) + 1  # also for an empty batch
    key = (rank * banks + (banks - 1 - bank)) * count + index[None, :]  # all distinct
    beam_size = common.dim(alive_seq, 1)
    _, order = tf.math.top_k(-key, k=2 * beam_size)
    selected = {name: tf.gather(value, order, batch_dims=1) for name, value in candidates.items()}
    sequences = tf.gather(alive_seq, selected["beams"], batch_dims=1)
    selected["seq"] = common.write_at(sequences, step, selected["tokens"])
    return selected


def _next_alive(selected):
    """The first `beam` selected candidates that do not end, their states, and the beams they came from."""
    beam_size = common.dim(selected["log_probs"], 1) // 2
    keeps = selected["valid"] & tf.logical_not(selected["ending"])
    position = tf.range(2 * beam_size)[None, :]
    _, index = tf.math.top_k(-tf.where(keeps, position, position + 2 * beam_size), k=beam_size)
    alive = {name: tf.gather(selected[name], index, batch_dims=1)
             for name in ("seq", "beams", "met", "progress", "current")}
    alive["log_probs"] = tf.where(tf.gather(keeps, index, batch_dims=1),
                                  tf.gather(selected["log_probs"], index, batch_dims=1), common.NEG_INF)
    return alive
