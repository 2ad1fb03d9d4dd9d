"""Beam search with length penalty (§6.1) in `keras.ops`, on every Keras backend (JAX, PyTorch, TensorFlow).

The algorithm of `beam_search.py`, step for step, so it returns the same tokens: per sentence an `alive` set of the
`beam_size` best unfinished hypotheses and a `finished` set ranked by `log P(Y) / lp(Y)` with
`lp(Y) = ((5 + |Y|) / 6) ** alpha` (`length_penalty.py`); each step keeps the `2 * beam_size` best one-token
extensions, an ending candidate (EOS, or the length limit) joins `finished` only if it ranks among the first
`beam_size`, and a sentence is done at its limit or when its `stopping` rule says so (`stopping.py`). Beams are
flattened into the batch (row `b * beam_size + k`) over fixed-shape buffers and the model's preallocated cache, in
one `keras.ops.while_loop`. On JAX, `neutral_compile.compiled` compiles it with `jax.jit`.
"""

import functools

import keras
from keras import ops

from t2t_keras.decoding import neutral_steps as steps
from t2t_keras.config import DecodingConfig
from t2t_keras.decoding.length_penalty import normalized_score
from t2t_keras.decoding.parameters import DEFAULTS, check_beam_size, check_length_penalty, check_num_return
from t2t_keras.decoding.stopping import check_stopping, settled
from t2t_keras.special_ids import EOS_ID


def beam_search(model, source, beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha, length_penalty="gnmt",
                max_extra_length=DEFAULTS.max_extra_length, max_length=None, min_length=0, num_return=1,
                stopping=DecodingConfig.stopping):
    """The `num_return` best translations of each source sentence.

    Args:
        model: a built `Transformer`.
        source: int `(batch, source_len)` ids, padded with 0, each row ending with EOS.
        beam_size: hypotheses kept per sentence (4 in the paper); a Python int.
        alpha: length-penalty exponent for `"gnmt"` (0.6 in the paper).
        length_penalty: `"gnmt"`, `"average"` or `"none"`.
        max_extra_length, max_length, min_length: as for `neutral_greedy.greedy_search`.
        num_return: size of the n-best list, at most `beam_size`.
        stopping: `"beam"` or `"exact"`, when a sentence is done (`decoding.stopping`).

    Returns:
        dict with `tokens`: int32 `(batch, num_return, bound)`, each ending with EOS (unless cut at its length
        limit) followed by 0s; `scores`: float32 `(batch, num_return)` normalised scores, best first; `log_probs`:
        their float32 log-probabilities.
    """
    check_num_return(num_return, check_beam_size(beam_size))
    check_length_penalty(length_penalty)
    check_stopping(stopping)
    source = ops.convert_to_tensor(source, "int32")
    bound, limits = steps.output_lengths(model, source, max_extra_length, max_length)
    source_mask, cache = steps.encode_for_search(model, source, bound, rows=beam_size)
    state = _initial_state(ops.shape(source)[0], beam_size, bound, cache)
    scoring = functools.partial(normalized_score, alpha=alpha, kind=length_penalty)
    step = functools.partial(_beam_step, model, source_mask=source_mask, limits=limits, min_length=min_length,
                             scoring=scoring, num_return=num_return, stopping=stopping)
    state = steps.search_loop(step, state, "done", bound)
    return {name: state[f"finished_{name}"][:, :num_return] for name in ("tokens", "scores", "log_probs")}


def _initial_state(batch, beam_size, bound, cache):
    """One live hypothesis (the empty one) per sentence; the other beams start at -inf."""
    first = ops.convert_to_tensor([0.0] + [steps.NEG_INF] * (beam_size - 1), "float32")
    sequences = ops.zeros((batch, beam_size, bound), "int32")
    nothing = ops.full((batch, beam_size), steps.NEG_INF, "float32")
    return {
        "step": steps.step_counter(),
        "alive_tokens": sequences,
        "alive_log_probs": ops.tile(first[None], (batch, 1)),
        "finished_tokens": sequences,
        "finished_scores": nothing,
        "finished_log_probs": nothing,
        "finished_count": ops.zeros((batch,), "int32"),
        "done": ops.zeros((batch,), "bool"),
        "cache": cache,
    }


def _beam_step(model, state, source_mask, limits, min_length, scoring, num_return, stopping):
    """Extends the alive hypotheses by one token and updates both sets."""
    step = state["step"]
    inputs = ops.reshape(steps.previous_tokens(state["alive_tokens"], step), (-1,))  # (batch * beam,)
    log_probs, cache = steps.next_log_probs(model, inputs, source_mask, state["cache"], step)
    log_probs = steps.mask_special_tokens(log_probs, step, min_length)
    candidates = _top_candidates(state["alive_tokens"], state["alive_log_probs"], log_probs, step)
    ending = ops.equal(candidates["tokens"], EOS_ID) | (step + 1 >= limits[:, None])  # (batch, 2 * beam)
    alive = _next_alive(candidates, ending)
    finished = _next_finished(state, candidates, ending, scoring(candidates["log_probs"], step + 1))
    done = state["done"] | (step + 1 >= limits) | settled(stopping, finished["count"], finished["scores"],
                                                          alive["log_probs"][:, 0], step, limits, scoring, num_return)
    return {
        "step": step + 1,
        "alive_tokens": alive["tokens"],
        "alive_log_probs": alive["log_probs"],
        "finished_tokens": finished["tokens"],
        "finished_scores": finished["scores"],
        "finished_log_probs": finished["log_probs"],
        "finished_count": finished["count"],
        "done": done,
        "cache": _reorder_cache(cache, alive["beams"]),
    }


def gather_rows(values, index):
    """`values[b, index[b, j], ...]` for `values` `(batch, n, ...)` and int `index` `(batch, k)`."""
    index = ops.reshape(index, tuple(index.shape) + (1,) * (len(values.shape) - 2))
    index = ops.broadcast_to(index, tuple(index.shape[:2]) + tuple(values.shape[2:]))
    return ops.take_along_axis(values, index, axis=1)


def _top_candidates(alive_tokens, alive_log_probs, log_probs, step):
    """The `2 * beam` most likely one-token extensions of the alive hypotheses, best first."""
    batch, beam_size, vocab = alive_tokens.shape[0], alive_tokens.shape[1], log_probs.shape[-1]
    total = alive_log_probs[:, :, None] + ops.reshape(log_probs, (batch, beam_size, vocab))
    top_log_probs, flat = ops.top_k(ops.reshape(total, (batch, beam_size * vocab)), k=2 * beam_size)
    flat = ops.cast(flat, "int32")
    beams, tokens = flat // vocab, flat % vocab  # (batch, 2 * beam)
    return {
        "tokens_so_far": steps.write_at(gather_rows(alive_tokens, beams), step, tokens),
        "log_probs": top_log_probs,
        "beams": beams,
        "tokens": tokens,
    }


def _next_alive(candidates, ending):
    """The `beam` most likely candidates that do not end, and the beams they came from."""
    beam_size = candidates["log_probs"].shape[1] // 2
    log_probs, index = ops.top_k(ops.where(ending, steps.NEG_INF, candidates["log_probs"]), k=beam_size)
    return {
        "tokens": gather_rows(candidates["tokens_so_far"], index),
        "log_probs": log_probs,
        "beams": gather_rows(candidates["beams"], index),
    }


def _next_finished(state, candidates, ending, scores):
    """Merges the ending candidates that hold a beam slot into the finished set of each sentence not done yet."""
    beam_size = candidates["log_probs"].shape[1] // 2
    joins = ending & (ops.arange(2 * beam_size) < beam_size)[None, :] & ops.logical_not(state["done"])[:, None]
    merged_scores = ops.concatenate([state["finished_scores"], ops.where(joins, scores, steps.NEG_INF)], axis=1)
    top_scores, index = ops.top_k(merged_scores, k=beam_size)  # ties keep the older hypothesis
    joined_log_probs = ops.where(joins, candidates["log_probs"], steps.NEG_INF)
    merged_log_probs = ops.concatenate([state["finished_log_probs"], joined_log_probs], axis=1)
    merged_tokens = ops.concatenate([state["finished_tokens"], candidates["tokens_so_far"]], axis=1)
    return {
        "tokens": gather_rows(merged_tokens, index),
        "scores": top_scores,
        "log_probs": gather_rows(merged_log_probs, index),
        "count": state["finished_count"] + ops.sum(ops.cast(joins, "int32"), axis=1),
    }


def _reorder_cache(cache, beams):
    """Gathers each self-attention cache row from the beam its hypothesis came from (cross-attention keys and
    values are equal across a sentence's beams and stay)."""
    batch, beam_size = beams.shape
    rows = ops.reshape(ops.arange(batch, dtype="int32")[:, None] * beam_size + beams, (-1,))  # (batch * beam,)
    gather = functools.partial(ops.take, indices=rows, axis=0)
    return [{**layer, "self": keras.tree.map_structure(gather, layer["self"])} for layer in cache]
