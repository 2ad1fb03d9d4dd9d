"""Beam search with length penalty (§6.1) over the key/value cache.

Beams are flattened into the batch (row `b * beam_size + k`): the source is
encoded once per sentence and its cross-attention keys/values are tiled over
the beams. The search keeps two sets per sentence, as tensor2tensor and
tensorflow/models do:

* `alive`: the `beam_size` best unfinished hypotheses, ranked by log-probability;
* `finished`: the `beam_size` best ended hypotheses, ranked by normalised score
  (see `length_penalty`).

Each step extends every alive hypothesis by every token and keeps the
`2 * beam_size` most likely candidates, which always leaves `beam_size` that
do not end. A candidate *ends* when its token is EOS or it reaches the
sentence's length limit. An ending candidate joins `finished` only if it ranks
among the first `beam_size` candidates, i.e. if it would have taken a beam
slot (fairseq's rule): so `beam_size=1, length_penalty="none"` is exactly
greedy decoding. The other candidates refill `alive`.

A sentence is done when it reaches its length limit or when its `stopping`
rule says so (`decoding.stopping`, see `stopping`): `"beam"` once twice
`beam_size` hypotheses have finished (the default), `"exact"` once no alive
hypothesis can still beat its n-best list. A done sentence's finished set
no longer changes, so its translation does not depend on the sentences batched
with it. The loop stops when every sentence is done.

The whole search is one `tf.while_loop` over fixed-shape tensors and compiles
with `tf.function(jit_compile=True)`; with `growing_cache=True` the decoder cache
grows step by step instead and a done sentence leaves the batch (`compaction`;
faster in graph mode, not with XLA). `length_penalty`
and `stopping` fix code paths, so they are Python values. `beam_size` and
`num_return` are Python ints for XLA, which needs the shapes they fix, or int32
scalar tensors in graph mode, where one traced search then serves every beam
size (an export's searches, `export.translator_module`); `alpha`, `min_length`
and, with a static `max_length`, `max_extra_length` may be tensors.
"""

import functools

import tensorflow as tf

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding import common
from t2t_keras.decoding.compaction import compacting_loop
from t2t_keras.decoding.length_penalty import normalized_score
from t2t_keras.decoding.parameters import DEFAULTS, check_beam_size, check_length_penalty, check_num_return
from t2t_keras.decoding.shortlist import vocabulary_ids
from t2t_keras.decoding.stopping import check_stopping, settled


def beam_search(model, source, beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha, length_penalty="gnmt",
                max_extra_length=DEFAULTS.max_extra_length,
                max_length=None, min_length=0, num_return=1, forced_prefix=None, output_ids=None,
                stopping=DecodingConfig.stopping, growing_cache=False):
    """The `num_return` best translations of each source sentence.

    Args:
        model: a built `Transformer`.
        source: int `(batch, source_len)` ids, padded with 0, each row ending with EOS.
        beam_size: number of hypotheses kept per sentence (4 in the paper).
        alpha, length_penalty: the exponent of `"gnmt"` (0.6 in the paper); `"gnmt"`, `"average"` or `"none"`.
        max_extra_length: a sentence stops after `input length + max_extra_length` tokens (§6.1).
        max_length: static bound on the output length (and cache size); defaults to the padded source width +
            `max_extra_length`.
        min_length: EOS is forbidden until this many tokens exist.
        num_return: size of the n-best list, at most `beam_size`.
        forced_prefix: optional int `(batch, width)` ids, 0-padded, that every hypothesis starts with (a language
            model's prompt; see `common.force_prefix`).
        output_ids, stopping: int32 `(S,)` shortlist vocabulary (`decoding.shortlist`; None: all ids); `"beam"` or
            `"exact"`, when a sentence is done (`decoding.stopping`).
        growing_cache: a growing cache (`common.new_cache`), done sentences dropped (`compaction`): graph mode only.

    Returns:
        dict with `tokens`: int32 `(batch, num_return, bound)`, each ending with EOS (unless cut at its length
        limit) followed by 0s; `scores`: float32 `(batch, num_return)` normalised scores, best first;
        `log_probs`: their float32 log-probabilities.
    """
    _check_options(beam_size, num_return, length_penalty, stopping)
    source = tf.convert_to_tensor(source, tf.int32)
    bound, limits = common.output_lengths(model, source, max_extra_length, max_length)
    tile = functools.partial(tf.repeat, repeats=beam_size, axis=0)
    source_mask, cache = _tiled_encoding(model, source, bound, tile, growing_cache)
    state = _initial_state(tf.shape(source)[0], beam_size, bound, cache)
    forced_prefix = None if forced_prefix is None else tile(tf.convert_to_tensor(forced_prefix, tf.int32))
    scoring = functools.partial(normalized_score, alpha=alpha, kind=length_penalty)
    step = functools.partial(_beam_step, model, min_length=min_length, scoring=scoring, num_return=num_return,
                             vocabulary=common.searched_vocabulary(model, output_ids), stopping=stopping,
                             growing=growing_cache)
    final = _run(step, state, bound, limits, common.row_inputs(source_mask, forced_prefix), beam_size, growing_cache)
    return _nbest(final, num_return)


_RESULTS = ("finished_seq", "finished_scores", "finished_log_probs", "finished_count", "done")


def _check_options(beam_size, num_return, length_penalty, stopping):
    """`beam_size` and `num_return`: Python ints in range, or scalar tensors (which the caller checks)."""
    if not (tf.is_tensor(beam_size) or tf.is_tensor(num_return)):
        check_num_return(num_return, check_beam_size(beam_size))
    check_length_penalty(length_penalty)
    check_stopping(stopping)


def _tiled_encoding(model, source, bound, tile, growing=False):
    """The source mask and the decoder's initial cache (`common.new_cache`), each sentence's rows repeated for its
    beams by `tile`."""
    source_mask = tile(model.source_mask(source))  # (batch * beam, source_len)
    cache = tf.nest.map_structure(tile, common.new_cache(model, model.encode(source, training=False), bound, growing))
    return source_mask, cache


def _nbest(state, num_return):
    """The search's result: the first `num_return` of each sentence's finished set, best first."""
    return {
        "tokens": state["finished_seq"][:, :num_return],
        "scores": state["finished_scores"][:, :num_return],
        "log_probs": state["finished_log_probs"][:, :num_return],
    }


def _initial_state(batch, beam_size, bound, cache):
    """One live hypothesis (the empty one) per sentence; the other beams start at -inf."""
    first = tf.where(tf.range(beam_size) == 0, 0.0, common.NEG_INF)
    sequences = tf.zeros((batch, beam_size, bound), tf.int32)
    nothing = tf.fill((batch, beam_size), common.NEG_INF)
    return {
        "step": tf.constant(0),
        "alive_seq": sequences,
        "alive_log_probs": tf.tile(first[None], (batch, 1)),
        "finished_seq": sequences,
        "finished_scores": nothing,
        "finished_log_probs": nothing,
        "finished_count": tf.zeros((batch,), tf.int32),
        "done": tf.zeros((batch,), tf.bool),
        "cache": cache,
    }


def _run(step, state, bound, limits, row_inputs, beam_size, compact):
    """The search loop: one that drops done sentences (`compact`, graph mode), or a plain one."""
    if compact:
        return compacting_loop(step, state, _RESULTS, bound, {"limits": limits}, row_inputs, width=beam_size)
    return common.search_loop(functools.partial(_reordered, step, limits=limits, **row_inputs), state, "done", bound)


def _reordered(step, state, **inputs):
    """`step` with the self-attention cache reordered by the beams the hypotheses extend."""
    new = dict(step(state, **inputs))
    beams = new.pop("beams")
    return {**new, "cache": _reorder_cache(new["cache"], beams)}


def _beam_step(model, state, source_mask, limits, min_length, scoring, num_return, forced_prefix=None,
               vocabulary=None, stopping=DecodingConfig.stopping, growing=False):
    """Extends the alive hypotheses by one token and updates both sets; the new cache is not yet reordered by
    `beams`, the beam each alive hypothesis extends. `vocabulary`: a shortlist's (`common.searched_vocabulary`)."""
    step = state["step"]
    output_ids = None if vocabulary is None else vocabulary.ids
    inputs = tf.reshape(common.previous_tokens(state["alive_seq"], step), (-1,))  # (batch * beam,)
    log_probs, cache = common.next_log_probs(model, inputs, source_mask, state["cache"], step, vocabulary, growing)
    log_probs = common.mask_special_tokens(log_probs, step, min_length, output_ids)
    if forced_prefix is not None:
        log_probs = common.force_prefix(log_probs, step, forced_prefix, output_ids)
    candidates = _top_candidates(state["alive_seq"], state["alive_log_probs"], log_probs, step, output_ids)
    ending = tf.equal(candidates["tokens"], common.EOS_ID) | (step + 1 >= limits[:, None])  # (batch, 2 * beam)
    alive = _next_alive(candidates, ending)
    finished = _next_finished(state, candidates, ending, scoring(candidates["log_probs"], step + 1))
    done = state["done"] | (step + 1 >= limits) | settled(stopping, finished["count"], finished["scores"],
                                                          alive["log_probs"][:, 0], step, limits, scoring, num_return)
    return {
        "step": step + 1,
        "alive_seq": alive["seq"],
        "alive_log_probs": alive["log_probs"],
        "finished_seq": finished["seq"],
        "finished_scores": finished["scores"],
        "finished_log_probs": finished["log_probs"],
        "finished_count": finished["count"],
        "done": done,
        "cache": cache,
        "beams": alive["beams"],
    }


def _top_candidates(alive_seq, alive_log_probs, log_probs, step, output_ids=None):
    """The `2 * beam` most likely one-token extensions of the alive hypotheses, best first.

    `log_probs` columns are the searched vocabulary (`output_ids` with a shortlist); the tokens are full ids.
    """
    batch, beam_size, vocab = tf.shape(alive_seq)[0], common.dim(alive_seq, 1), common.dim(log_probs, -1)
    total = alive_log_probs[:, :, None] + tf.reshape(log_probs, (batch, beam_size, vocab))
    top_log_probs, flat = tf.math.top_k(tf.reshape(total, (batch, -1)), k=2 * beam_size)  # (batch, 2 * beam)
    beams, tokens = flat // vocab, vocabulary_ids(flat % vocab, output_ids)
    sequences = tf.gather(alive_seq, beams, batch_dims=1)  # (batch, 2 * beam, bound)
    return {
        "seq": common.write_at(sequences, step, tokens),
        "log_probs": top_log_probs,
        "beams": beams,
        "tokens": tokens,
    }


def _next_alive(candidates, ending):
    """The `beam` most likely candidates that do not end, and the beams they came from."""
    beam_size = common.dim(candidates["log_probs"], 1) // 2
    masked = tf.where(ending, common.NEG_INF, candidates["log_probs"])
    log_probs, index = tf.math.top_k(masked, k=beam_size)
    return {
        "seq": tf.gather(candidates["seq"], index, batch_dims=1),
        "log_probs": log_probs,
        "beams": tf.gather(candidates["beams"], index, batch_dims=1),
    }


def _next_finished(state, candidates, ending, scores):
    """Merges the ending candidates that hold a beam slot into the finished set of each sentence not done yet."""
    beam_size = common.dim(candidates["log_probs"], 1) // 2
    in_beam = tf.range(2 * beam_size) < beam_size
    joins = ending & in_beam[None, :] & tf.logical_not(state["done"])[:, None]
    merged_scores = tf.concat([state["finished_scores"], tf.where(joins, scores, common.NEG_INF)], axis=1)
    top_scores, index = tf.math.top_k(merged_scores, k=beam_size)  # ties keep the older hypothesis
    joined_log_probs = tf.where(joins, candidates["log_probs"], common.NEG_INF)
    merged_log_probs = tf.concat([state["finished_log_probs"], joined_log_probs], axis=1)
    merged_seq = tf.concat([state["finished_seq"], candidates["seq"]], axis=1)
    return {
        "seq": tf.gather(merged_seq, index, batch_dims=1),
        "scores": top_scores,
        "log_probs": tf.gather(merged_log_probs, index, batch_dims=1),
        "count": state["finished_count"] + tf.reduce_sum(tf.cast(joins, tf.int32), axis=1),
    }


def _reorder_cache(cache, beams):
    """Gathers each self-attention cache row from the beam its hypothesis came from.

    The cross-attention keys/values are equal across a sentence's beams, so
    they are left in place.
    """
    batch, beam_size = tf.shape(beams)[0], common.dim(beams, 1)
    rows = tf.reshape(tf.range(batch)[:, None] * beam_size + beams, (-1,))  # (batch * beam,)
    gather = functools.partial(tf.gather, indices=rows, axis=0)
    return [{**layer, "self": tf.nest.map_structure(gather, layer["self"])} for layer in cache]
