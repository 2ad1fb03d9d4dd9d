"""Pieces shared by the decoders: output-length limits, buffer writes, one cached step, the search loop.

Length conventions used throughout `decoding/`:

* the *input length* of a sentence is its number of non-padding source ids,
  EOS included;
* a sentence may generate at most `input length + max_extra_length` tokens
  (EOS included), §6.1, and never more than the *bound*: the static size of the
  token buffers and of the self-attention cache;
* a hypothesis that reaches its limit without EOS ends there, without EOS;
* PAD and BOS are never generated, so every id before EOS is non-zero and the
  buffers hold 0 after it.
"""

from typing import Any, NamedTuple

import tensorflow as tf

from t2t_keras.decoding.parameters import DEFAULTS
from t2t_keras.decoding.shortlist import searched_ids, shortlist_slots
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


def dim(tensor, axis):
    """The size of `tensor` along `axis`: a Python int where the shape is static, else a scalar tensor."""
    return tensor.shape[axis] if tensor.shape[axis] is not None else tf.shape(tensor)[axis]


def source_lengths(source, pad_id=PAD_ID):
    """`(batch,)` int32 number of real (non-padding) ids in each source row."""
    return tf.reduce_sum(tf.cast(tf.not_equal(source, pad_id), tf.int32), axis=1)


def output_bound(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None):
    """Size of the token buffers and of the cache.

    `max_length` when given (a Python int keeps every shape static), otherwise
    the padded source width plus `max_extra_length`, which must then be a Python
    int. Capped by `model.max_length`, the longest sequence the model accepts.
    """
    if max_length is None:
        if not isinstance(max_extra_length, int):
            raise ValueError(
                "max_extra_length sizes the buffers when max_length is None, so it must be a Python int. "
                f"Received: max_extra_length={max_extra_length!r}; pass max_length to use a tensor."
            )
        max_length = dim(source, 1) + max_extra_length
    if isinstance(max_length, int):
        return max(1, min(max_length, model.max_length))
    return tf.clip_by_value(max_length, 1, model.max_length)


def output_limits(source, bound, max_extra_length=DEFAULTS.max_extra_length, pad_id=PAD_ID):
    """`(batch,)` int32 longest output of each sentence: input length + extra, within [1, bound]."""
    limits = source_lengths(source, pad_id) + tf.cast(max_extra_length, tf.int32)
    return tf.clip_by_value(limits, 1, bound)


def output_lengths(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None):
    """`output_bound` and `output_limits` of a search: the buffer size and each sentence's `(batch,)` limit."""
    bound = output_bound(model, source, max_extra_length, max_length)
    return bound, output_limits(source, bound, max_extra_length, model.pad_id)


def write_at(buffer, index, values):
    """`buffer` (..., length) with column `index` replaced by `values` (...)."""
    columns = tf.range(tf.shape(buffer)[-1])
    return tf.where(tf.equal(columns, index), tf.expand_dims(values, -1), buffer)


def previous_tokens(sequences, step):
    """Decoder input at `step`: BOS first, then the token written at `step - 1`."""
    last = tf.gather(sequences, tf.maximum(step - 1, 0), axis=-1)
    return tf.where(tf.equal(step, 0), tf.constant(BOS_ID, sequences.dtype), last)


def mask_special_tokens(log_probs, step, min_length=0, output_ids=None):
    """Sets to -inf the ids that may not come next: PAD and BOS always, EOS before `min_length`.

    PAD would be indistinguishable from the padding after EOS, and BOS only
    starts the decoder input. The other log-probabilities are not renormalised
    (as in fairseq), so scores stay the model's log-probabilities. With a
    shortlist, column i of `log_probs` is id `output_ids[i]` (`decoding.shortlist`).
    """
    vocab = searched_ids(log_probs, output_ids)
    early_eos = tf.logical_and(tf.equal(vocab, EOS_ID), step + 1 < min_length)
    forbidden = tf.equal(vocab, PAD_ID) | tf.equal(vocab, BOS_ID) | early_eos
    return tf.where(forbidden, tf.constant(NEG_INF, log_probs.dtype), log_probs)


def force_prefix(log_probs, step, prefix, output_ids=None):
    """Rows whose `prefix` has a token at `step` may only emit that token, with log-probability 0.

    `prefix` int `(batch, width)` is padded with PAD_ID. A language model's
    prompt is fed this way through the same search loops; the forced tokens
    add nothing to the scores, which then measure the continuation alone.
    """
    width = tf.shape(prefix)[1]
    column = tf.gather(prefix, tf.minimum(step, width - 1), axis=1)  # (batch,)
    forced = (step < width) & tf.not_equal(column, PAD_ID)
    vocab = searched_ids(log_probs, output_ids)
    only = tf.where(tf.equal(vocab[None, :], column[:, None]), 0.0, NEG_INF)
    return tf.where(forced[:, None], tf.cast(only, log_probs.dtype), log_probs)


class SearchedVocabulary(NamedTuple):
    """A shortlist's searched vocabulary as a search's steps use it (`searched_vocabulary`)."""
    ids: Any  # int32 (S,) full-vocabulary ids, PAD_ID padding (`decoding.shortlist.batch_vocabulary`)
    slots: Any  # bool (S,): the slots holding an id (`shortlist_slots`)
    weights: Any  # the output projection's weights of `ids` (`Transformer.output_weights`), or None


def searched_vocabulary(model, output_ids):
    """`output_ids` prepared once for a whole search, before its loop: a step then neither gathers the projection's
    weights nor finds the padding slots again. None without a shortlist."""
    if output_ids is None:
        return None
    weights = model.output_weights(output_ids) if hasattr(model, "output_weights") else None
    return SearchedVocabulary(output_ids, shortlist_slots(output_ids), weights)


def next_log_probs(model, tokens, source_mask, cache, step, vocabulary=None, growing=False):
    """One cached decoder step: float32 log-probabilities `(batch, vocab)` and the new cache.

    `tokens` `(batch,)` are the ids at position `step`. With a shortlist's `vocabulary` (`searched_vocabulary`)
    the log-probabilities `(batch, S)` cover its ids, normalised over them; its padding slots are -inf.
    `growing`: `cache` grows (`new_cache`).
    """
    options = {"growing": True} if growing else {}  # models without growing caches take no such argument
    if vocabulary is None:
        out = model.decode_step(tokens[:, None], cache, step, source_mask, **options)
        return tf.nn.log_softmax(out.logits[:, 0]), out.cache
    out = model.decode_step(tokens[:, None], cache, step, source_mask, output_ids=vocabulary.ids,
                            output_weights=vocabulary.weights, **options)
    logits = tf.where(vocabulary.slots, out.logits[:, 0], NEG_INF)  # (batch, S)
    return tf.nn.log_softmax(logits), out.cache


def new_cache(model, memory, bound, growing=False):
    """The decoder cache of a search: `bound` preallocated self-attention slots, or (`growing`) a cache that each
    step extends.

    Preallocated slots keep every shape fixed, which XLA needs; but each step then writes one slot by copying the
    whole buffer, and attends to and reorders all `bound` slots. A growing cache reads and writes only the
    positions decoded so far: the faster choice in graph mode (docs/results.md, "Beam search that stops when the
    beam is spent"), not compilable with XLA.
    """
    return model.init_cache(memory, None if growing else bound)


def row_inputs(source_mask, forced_prefix=None):
    """A search step's inputs with one row per decoder row: the source mask and, if any, the forced prefix."""
    return {"source_mask": source_mask, **({} if forced_prefix is None else {"forced_prefix": forced_prefix})}


def search_loop(step, state, done, bound, growing=False):
    """Runs `state = step(state)` in one `tf.while_loop` until every sentence is done, at most `bound` times.

    `state` is a dict of tensors whose shapes stay the same from step to step, except, with `growing`, the
    self-attention keys/values of `state["cache"]` (`new_cache`), whose length axis grows; its bool `(batch,)`
    entry `state[done]` marks the sentences that are done.
    """

    def body(state):
        return (step(state),)

    def not_done(state):
        return tf.logical_not(tf.reduce_all(state[done]))

    invariants = (_growing_invariants(state),) if growing else None
    (state,) = tf.while_loop(not_done, body, (state,), maximum_iterations=bound, shape_invariants=invariants)
    return state


def _growing_invariants(state):
    """The shapes of `state`, with the length axis of each self-attention key/value `(batch, heads, length, dim)`
    left open."""
    shapes = tf.nest.map_structure(lambda tensor: tensor.shape, state)

    def open_length(shape):
        return tf.TensorShape([shape[0], shape[1], None, shape[3]])

    shapes["cache"] = [{**layer, "self": tf.nest.map_structure(open_length, layer["self"])}
                       for layer in shapes["cache"]]
    return shapes
