"""Beam search with length penalty (§6.1) over the key/value cache, on every Keras backend.

Beams are flattened into the batch (row `b * beam_size + k`): the source is
encoded once per sentence and its cross-attention keys/values are tiled over
the beams. The search keeps two sets per sentence, as tensor2tensor and
tensorflow/models do:

* `alive`: the `beam_size` best unfinished hypotheses, ranked by log-probability;
* `finished`: the `beam_size` best ended hypotheses, ranked by normalised score
  (see `length_penalty`).

Each step extends every alive hypothesis by every token and keeps the
`2 * beam_size` most likely candidates, which always leaves `beam_size` that
do not end. A candidate *ends* when its token is the end id or it reaches the
sentence's length limit. An ending candidate joins `finished` only if it ranks
among the first `beam_size` candidates, i.e. if it would have taken a beam
slot (fairseq's rule): so `beam_size=1, length_penalty="none"` is exactly
greedy decoding. The other candidates refill `alive`.

Which candidates a step weighs is the search's `BeamRule`: the plain rule above, or lexically constrained
decoding (`constrained.ConstraintRule`), which adds candidates and orders them by the constraints they hold.

A sentence is done when it reaches its length limit or when its `stopping`
rule says so (`decoding.stopping`, see `stopping`): `"beam"` once twice
`beam_size` hypotheses have finished (the default), `"exact"` once no alive
hypothesis can still beat its n-best list. A done sentence's finished set
no longer changes, so its translation does not depend on the sentences batched
with it. The loop stops when every sentence is done.

The step is written in `keras.ops`. Over fixed-shape tensors (`loops.search_loop`) the search compiles with
`tf.function(jit_compile=True)` and `jax.jit`; with `growing_cache=True` (TensorFlow, graph mode) the decoder
cache grows step by step instead and a done sentence leaves the batch (`compaction`). `length_penalty` and
`stopping` fix code paths, so they are Python values. `beam_size` and `num_return` are Python ints for XLA and
JAX, which need the shapes they fix, or int32 scalar tensors in TensorFlow's graph mode, where one traced search
then serves every beam size (an export's searches, `export.search_table`); `alpha`, `min_length` and, with a
static `max_length`, `max_extra_length` may be tensors.
"""

import functools
from typing import Any, NamedTuple

from keras import ops

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding import common
from t2t_keras.decoding.length_normalization import check_length_penalty, normalized_score
from t2t_keras.decoding.loops import search_loop
from t2t_keras.decoding.parameters import check_beam_size, check_num_return, check_stopping
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.stopping import settled


class Choice(NamedTuple):
    """What a `BeamRule` makes of one step: `candidates` (dict of `(batch, 2 * beam)` tensors, the first `beam`
    holding the beam slots: `seq`, `log_probs`, `beams`, `tokens`), `joins` (bool: those that end and may join
    `finished`) and `alive` (dict of `(batch, beam)` tensors: the new alive set, `seq`, `log_probs`, `beams`, and
    the rule's own state)."""

    candidates: Any
    joins: Any
    alive: Any


class BeamRule:
    """The plain beam search's choice of a step's candidates: the `2 * beam` most likely extensions.

    A rule is the search's one extension point. It may keep state per hypothesis (`initial_state`, names in
    `state_names`, returned in `Choice.alive`), and `compacts` says whether its search may drop done sentences
    from the batch (which gathers the per-sentence state and inputs).
    """

    state_names = ()
    compacts = True

    def initial_state(self, batch, beam_size):
        return {}

    def choose(self, state, log_probs, step, limits, ids, output_ids=None):
        """The step's `Choice`, from the alive set's `log_probs` `(batch * beam, vocab)` of the next token."""
        candidates = top_candidates(state["alive_seq"], state["alive_log_probs"], log_probs, step, output_ids)
        ending = ops.equal(candidates["tokens"], ids.end) | (step + 1 >= limits[:, None])  # (batch, 2 * beam)
        return Choice(candidates, ending, next_alive(candidates, ending))


PLAIN = BeamRule()


def beam_search(model, source, beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha,
                length_penalty=DEFAULTS.length_penalty, max_extra_length=DEFAULTS.max_extra_length, max_length=None,
                min_length=0, num_return=1, forced_prefix=None, output_ids=None, stopping=DecodingConfig.stopping,
                growing_cache=False, rule=PLAIN, max_output_length=None, end_at_limit=False):
    """The `num_return` best translations of each source sentence.

    Args:
        model: a built `Transformer` (or any `families.Searchable`).
        source: int `(batch, source_len)` ids, padded, each row ending with the end id.
        beam_size, num_return: hypotheses kept per sentence (4 in the paper); the n-best list's size.
        alpha, length_penalty: the exponent (0.6 in the paper); `"gnmt"`, `"power"`, `"average"` or `"none"`.
        max_extra_length, max_length: a sentence stops after `input length + max_extra_length` tokens (§6.1);
            a static bound on them (and the cache), by default the padded source width + `max_extra_length`.
        min_length: the end id is forbidden until this many tokens exist.
        forced_prefix: optional int `(batch, width)` ids, padded, every hypothesis starts with (`common`).
        output_ids, stopping: int32 `(S,)` shortlist vocabulary (`decoding.shortlist`; None: all ids); when a
            sentence is done (`decoding.stopping`).
        growing_cache, rule: a growing cache, done sentences dropped where the rule allows it (graph mode only);
            how a step's candidates are chosen (`BeamRule`; `constrained.ConstraintRule`).
        max_output_length, end_at_limit: the longest output whatever the input's length (a Python int; None: no
            such limit); a sentence's last allowed token is the end id (`common.force_end`).

    Returns:
        dict with `tokens` int32 `(batch, num_return, bound)`, each ending with the end id (unless cut at its
        limit), then padding; `scores` float32 `(batch, num_return)`, best first; `log_probs` of the same.
    """
    check_options(beam_size, num_return, length_penalty, stopping)
    source = ops.convert_to_tensor(source, "int32")
    ids = common.search_ids(model)
    bound, limits = common.output_lengths(model, source, max_extra_length, max_length, max_output_length)
    source_mask, state = _start(model, source, beam_size, bound, ids, rule, growing_cache)
    scoring = functools.partial(normalized_score, alpha=alpha, kind=length_penalty)
    step = functools.partial(beam_step, model, min_length=min_length, scoring=scoring, num_return=num_return,
                             vocabulary=common.searched_vocabulary(model, output_ids), stopping=stopping,
                             growing=growing_cache, ids=ids, rule=rule, end_at_limit=end_at_limit)
    row_inputs = common.row_inputs(source_mask, _per_beam(forced_prefix, beam_size))
    final = _run(step, state, bound, limits, row_inputs, beam_size, growing_cache, rule.compacts)
    return {name: final[f"finished_{key}"][:, :num_return] for name, key in NBEST.items()}


def _start(model, source, beam_size, bound, ids, rule, growing):
    """The source mask, each sentence's rows repeated for its beams, and the search's initial state."""
    source_mask, cache = common.encoded(model, source, bound, beam_size, growing)
    batch = common.dim(source, 0)
    return source_mask, {**initial_state(batch, beam_size, bound, cache, ids), **rule.initial_state(batch, beam_size)}


def _per_beam(forced_prefix, beam_size):
    """Each sentence's forced prefix repeated for its beams, as its source rows are (None: no prefix)."""
    if forced_prefix is None:
        return None
    return ops.repeat(ops.convert_to_tensor(forced_prefix, "int32"), beam_size, axis=0)


NBEST = {"tokens": "seq", "scores": "scores", "log_probs": "log_probs"}  # the results, from the finished set
RESULTS = ("finished_seq", "finished_scores", "finished_log_probs", "finished_count", "done")


def check_options(beam_size, num_return, length_penalty, stopping):
    """`beam_size` and `num_return`: Python ints in range, or scalar tensors (which the caller checks)."""
    if isinstance(beam_size, int) and isinstance(num_return, int):
        check_num_return(num_return, check_beam_size(beam_size))
    check_length_penalty(length_penalty)
    check_stopping(stopping)


def initial_state(batch, beam_size, bound, cache, ids):
    """One live hypothesis (the empty one) per sentence; the other beams start at -inf."""
    first = ops.where(ops.arange(beam_size, dtype="int32") == 0, 0.0, common.NEG_INF)
    sequences = ops.full((batch, beam_size, bound), ids.pad, "int32")
    nothing = ops.full((batch, beam_size), common.NEG_INF, "float32")
    return {
        "step": ops.convert_to_tensor(0, "int32"),  # a strongly typed scalar, as `jax.lax.while_loop` needs
        "alive_seq": sequences,
        "alive_log_probs": ops.tile(ops.cast(first, "float32")[None], (batch, 1)),
        "finished_seq": sequences,
        "finished_scores": nothing,
        "finished_log_probs": nothing,
        "finished_count": ops.zeros((batch,), "int32"),
        "done": ops.zeros((batch,), "bool"),
        "cache": cache,
    }


def _run(step, state, bound, limits, row_inputs, beam_size, growing, compacts):
    """The search loop: one that drops done sentences (graph mode, a growing cache), or a plain one."""
    if growing and compacts:
        from t2t_keras.decoding.compaction import compacting_loop  # graph mode

        return compacting_loop(step, state, RESULTS, bound, {"limits": limits}, row_inputs, width=beam_size)
    return search_loop(functools.partial(_reordered, step, limits=limits, **row_inputs), state, "done", bound,
                       growing)


def _reordered(step, state, **inputs):
    """`step` with the self-attention cache reordered by the beams the hypotheses extend."""
    new = dict(step(state, **inputs))
    beams = new.pop("beams")
    return {**new, "cache": reorder_cache(new["cache"], beams)}


def beam_step(model, state, source_mask, limits, min_length, scoring, num_return, ids, rule=PLAIN,
              forced_prefix=None, vocabulary=None, stopping=DecodingConfig.stopping, growing=False, end_at_limit=False):
    """Extends the alive hypotheses by one token and updates both sets; the new cache is not yet reordered by
    `beams`, the beam each alive hypothesis extends. `vocabulary`: a shortlist's (`common.searched_vocabulary`)."""
    step = state["step"]
    output_ids = None if vocabulary is None else vocabulary.ids
    inputs = ops.reshape(common.previous_tokens(state["alive_seq"], step, ids), (-1,))  # (batch * beam,)
    log_probs, cache = common.next_log_probs(model, inputs, source_mask, state["cache"], step, vocabulary, growing)
    log_probs = common.next_token_log_probs(log_probs, step, ids, limits, common.dim(state["alive_seq"], 1),
                                            min_length, forced_prefix, end_at_limit, output_ids)
    choice = rule.choose(state, log_probs, step, limits, ids, output_ids)
    alive = choice.alive
    finished = next_finished(state, choice.candidates, choice.joins, scoring(choice.candidates["log_probs"], step + 1))
    best_alive = ops.max(alive["log_probs"], axis=1)
    done = state["done"] | (step + 1 >= limits) | settled(stopping, finished["count"], finished["scores"],
                                                          best_alive, step, limits, scoring, num_return)
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
        **{name: alive[name] for name in rule.state_names},
    }


def top_candidates(alive_seq, alive_log_probs, log_probs, step, output_ids=None):
    """The `2 * beam` most likely one-token extensions of the alive hypotheses, best first.

    `log_probs` columns are the searched vocabulary (`output_ids` with a shortlist); the tokens are full ids.
    """
    batch, beam_size, vocab = common.dim(alive_seq, 0), common.dim(alive_seq, 1), common.dim(log_probs, -1)
    total = alive_log_probs[:, :, None] + ops.reshape(log_probs, (batch, beam_size, vocab))
    top_log_probs, flat = ops.top_k(ops.reshape(total, (batch, -1)), k=2 * beam_size)  # (batch, 2 * beam)
    flat = ops.cast(flat, "int32")
    beams, tokens = flat // vocab, common.vocabulary_ids(flat % vocab, output_ids)
    sequences = common.gather_rows(alive_seq, beams)  # (batch, 2 * beam, bound)
    return {
        "seq": common.write_at(sequences, step, tokens),
        "log_probs": top_log_probs,
        "beams": beams,
        "tokens": tokens,
    }


def next_alive(candidates, ending):
    """The `beam` most likely candidates that do not end, and the beams they came from."""
    beam_size = common.dim(candidates["log_probs"], 1) // 2
    masked = ops.where(ending, common.NEG_INF, candidates["log_probs"])
    log_probs, index = ops.top_k(masked, k=beam_size)
    return {
        "seq": common.gather_rows(candidates["seq"], index),
        "log_probs": log_probs,
        "beams": common.gather_rows(candidates["beams"], index),
    }


def next_finished(state, candidates, joins, scores):
    """Merges the candidates that end and hold a beam slot (`joins`, among the first `beam`) into the finished set
    of each sentence not done yet."""
    beam_size = common.dim(candidates["log_probs"], 1) // 2
    in_beam = ops.arange(2 * beam_size, dtype="int32") < beam_size
    joins = joins & in_beam[None, :] & ops.logical_not(state["done"])[:, None]
    merged_scores = ops.concatenate([state["finished_scores"], ops.where(joins, scores, common.NEG_INF)], axis=1)
    top_scores, index = ops.top_k(merged_scores, k=beam_size)  # ties keep the older hypothesis
    joined_log_probs = ops.where(joins, candidates["log_probs"], common.NEG_INF)
    merged_log_probs = ops.concatenate([state["finished_log_probs"], joined_log_probs], axis=1)
    merged_seq = ops.concatenate([state["finished_seq"], candidates["seq"]], axis=1)
    return {
        "seq": common.gather_rows(merged_seq, index),
        "scores": top_scores,
        "log_probs": common.gather_rows(merged_log_probs, index),
        "count": state["finished_count"] + ops.sum(ops.cast(joins, "int32"), axis=1),
    }


def reorder_cache(cache, beams):
    """Gathers each self-attention cache row from the beam its hypothesis came from.

    The cross-attention keys/values are equal across a sentence's beams, so
    they are left in place.
    """
    batch, beam_size = common.dim(beams, 0), common.dim(beams, 1)
    rows = ops.reshape(ops.arange(batch, dtype="int32")[:, None] * beam_size + beams, (-1,))  # (batch * beam,)
    return [{**layer, "self": common.map_rows(lambda x: ops.take(x, rows, axis=0), layer["self"])}
            for layer in cache]
