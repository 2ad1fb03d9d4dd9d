"""Pieces shared by the searches, in `keras.ops`: output-length limits, buffer writes, one cached step.

The searches (`greedy`, `beam_search`, `constrained`) are written once, in `keras.ops`, and run on every Keras
backend; `loops` runs their steps, in a fixed-shape loop (XLA, LiteRT, JAX, PyTorch) or, on TensorFlow in graph
mode, over a growing cache that drops done sentences.

Length conventions used throughout `decoding/`:

* the *input length* of a sentence is its number of non-padding source ids,
  EOS included;
* a sentence may generate at most `input length + max_extra_length` tokens
  (EOS included), §6.1, and never more than the *bound*: the static size of the
  token buffers and of the self-attention cache;
* a sentence never generates more than `max_output_length` tokens when it is given
  (an absolute limit, Hugging Face's `max_new_tokens`);
* a hypothesis that reaches its limit without EOS ends there, without EOS; with
  `end_at_limit` (Hugging Face's `forced_eos_token_id`) its last token is EOS instead;
* PAD and the decoder's start id are never generated (the start id may be generated
  where it is also the end id, as M2M-100's is), so every id before EOS is not PAD,
  and the buffers hold PAD after it.

The ids are the model's own (`search_ids`): PAD, the start id and EOS of its `special_ids`.
"""

from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


class SearchIds(NamedTuple):
    """The ids a search treats apart: `pad` (padding, never generated), `start` (the decoder's first input, never
    generated), `end` (ends a hypothesis)."""

    pad: int
    start: int
    end: int


def search_ids(model):
    """The model's `SearchIds` (its `special_ids` where it declares them, else the package's fixed ids)."""
    special = getattr(model, "special_ids", None)
    if special is None:
        return SearchIds(PAD_ID, BOS_ID, EOS_ID)
    return SearchIds(special.pad, special.decoder_start, special.eos)


def dim(tensor, axis):
    """The size of `tensor` along `axis`: a Python int where the shape is static, else a scalar tensor."""
    size = tensor.shape[axis]
    return size if size is not None else ops.shape(tensor)[axis]


# Two steps of every search have a one-op form on TensorFlow that `keras.ops` spells with several: chosen here.
def _on_tensorflow():
    return keras.backend.backend() == "tensorflow"


def gather_rows(values, index):
    """`values[b, index[b, j], ...]` for `values` `(batch, n, ...)` and int `index` `(batch, k)`.

    TensorFlow's batched gather is one op; `take_along_axis`, which the other backends use, broadcasts the index
    over the trailing axes first."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.gather(values, index, batch_dims=1)
    rank = len(values.shape)
    index = ops.reshape(index, tuple(ops.shape(index)) + (1,) * (rank - 2))
    index = ops.broadcast_to(index, tuple(ops.shape(index)[:2]) + tuple(ops.shape(values)[2:]))
    return ops.take_along_axis(values, index, axis=1)


def argmax_ids(log_probs):
    """`(batch,)` int32 column of each row's largest value (the lowest on ties).

    `keras.ops.argmax` first rewrites every -0.0 of the `(batch, vocab)` input (four elementwise passes a step),
    which log-probabilities never hold; TensorFlow's own argmax is one op."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
    return ops.cast(ops.argmax(log_probs, axis=-1), "int32")


def map_rows(function, structure):
    """`function` applied to every tensor of a nested `structure` (a cache, a dict of inputs)."""
    return keras.tree.map_structure(function, structure)


def source_lengths(source, pad_id=PAD_ID):
    """`(batch,)` int32 number of real (non-padding) ids in each source row."""
    return ops.sum(ops.cast(ops.not_equal(source, pad_id), "int32"), axis=1)


def output_bound(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None,
                 max_output_length=None):
    """Size of the token buffers and of the cache.

    `max_length` when given (a Python int keeps every shape static), otherwise
    the padded source width plus `max_extra_length`, which must then be a Python
    int. Capped by `max_output_length` when given (a Python int) and by `model.max_length`, the longest sequence
    the model accepts.
    """
    if max_length is None:
        if not isinstance(max_extra_length, int):
            raise ValueError(
                "max_extra_length sizes the buffers when max_length is None, so it must be a Python int. "
                f"Received: max_extra_length={max_extra_length!r}; pass max_length to use a tensor."
            )
        max_length = dim(source, 1) + max_extra_length
    longest = model.max_length if max_output_length is None else min(max_output_length, model.max_length)
    if isinstance(max_length, int):
        return max(1, min(max_length, longest))
    return ops.clip(max_length, 1, longest)


def output_limits(source, bound, max_extra_length=DEFAULTS.max_extra_length, pad_id=PAD_ID):
    """`(batch,)` int32 longest output of each sentence: input length + extra, within [1, bound]."""
    limits = source_lengths(source, pad_id) + ops.cast(max_extra_length, "int32")
    return ops.clip(limits, 1, bound)


def output_lengths(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None,
                   max_output_length=None):
    """`output_bound` and `output_limits` of a search: the buffer size and each sentence's `(batch,)` limit."""
    bound = output_bound(model, source, max_extra_length, max_length, max_output_length)
    return bound, output_limits(source, bound, max_extra_length, model.pad_id)


def write_at(buffer, index, values):
    """`buffer` (..., length) with column `index` replaced by `values` (...)."""
    columns = ops.arange(dim(buffer, -1), dtype="int32")
    return ops.where(ops.equal(columns, index), ops.expand_dims(ops.cast(values, buffer.dtype), -1), buffer)


def previous_tokens(sequences, step, ids):
    """Decoder input at `step`: the start id first, then the token written at `step - 1`."""
    last = ops.take(sequences, ops.maximum(step - 1, 0), axis=-1)
    return ops.where(ops.equal(step, 0), ops.cast(ids.start, sequences.dtype), last)


def mask_special_tokens(log_probs, step, ids, min_length=0, output_ids=None):
    """Sets to -inf the ids that may not come next: PAD and the start id always, the end id before `min_length`.

    PAD would be indistinguishable from the padding after the end (Marian's checkpoints forbid it too, their
    `bad_words_ids`), and the start id only starts the decoder input, unless it is also the end id (M2M-100's).
    The other log-probabilities are not renormalised (as in fairseq and Hugging Face's beam search), so scores
    stay the model's log-probabilities. With a shortlist, column i of `log_probs` is id `output_ids[i]`
    (`decoding.shortlist`).
    """
    vocab = searched_ids(log_probs, output_ids)
    early_end = ops.logical_and(ops.equal(vocab, ids.end), step + 1 < min_length)
    forbidden = ops.equal(vocab, ids.pad) | early_end
    if ids.start != ids.end:
        forbidden = forbidden | ops.equal(vocab, ids.start)
    return ops.where(forbidden, ops.cast(NEG_INF, log_probs.dtype), log_probs)


def force_end(log_probs, step, limits, ids, rows=1, output_ids=None):
    """Sentences at their last allowed token (`step + 1 >= limits`) may only end: the end id with log-probability
    0, as Hugging Face's `forced_eos_token_id` forces it. `limits`: `(batch,)`; `log_probs`: `rows` decoder rows
    per sentence (its beams)."""
    vocab = searched_ids(log_probs, output_ids)
    only_end = ops.where(ops.equal(vocab, ids.end), 0.0, NEG_INF)[None, :]
    last = step + 1 >= limits
    if not (isinstance(rows, int) and rows == 1):
        last = ops.repeat(last, rows, axis=0)
    return ops.where(last[:, None], ops.cast(only_end, log_probs.dtype), log_probs)


def force_prefix(log_probs, step, prefix, pad_id=PAD_ID, output_ids=None):
    """Rows whose `prefix` has a token at `step` may only emit that token, with log-probability 0.

    `prefix` int `(batch, width)` is padded with `pad_id`. A language model's
    prompt is fed this way through the same search loops; the forced tokens
    add nothing to the scores, which then measure the continuation alone.
    """
    width = dim(prefix, 1)
    column = ops.take(prefix, ops.minimum(step, width - 1), axis=1)  # (batch,)
    forced = (step < width) & ops.not_equal(column, pad_id)
    vocab = searched_ids(log_probs, output_ids)
    only = ops.where(ops.equal(vocab[None, :], column[:, None]), 0.0, NEG_INF)
    return ops.where(forced[:, None], ops.cast(only, log_probs.dtype), log_probs)


def next_token_log_probs(log_probs, step, ids, limits, rows=1, min_length=0, forced_prefix=None,
                         end_at_limit=False, output_ids=None):
    """`log_probs` of the next token with what may not come next at -inf: the special ids (`mask_special_tokens`),
    everything but a forced prefix's token (`force_prefix`) and, with `end_at_limit`, everything but the end id at
    a sentence's last token (`force_end`), in Hugging Face's order (bad words, forced first token, forced end)."""
    log_probs = mask_special_tokens(log_probs, step, ids, min_length, output_ids)
    if forced_prefix is not None:
        log_probs = force_prefix(log_probs, step, forced_prefix, ids.pad, output_ids)
    if end_at_limit:
        log_probs = force_end(log_probs, step, limits, ids, rows, output_ids)
    return log_probs


def shortlist_slots(output_ids):
    """bool `(S,)`: the slots of a shortlist's `output_ids` that hold an id (id 0 first, then 0 is padding), not
    padding (`decoding.shortlist`)."""
    return ops.not_equal(output_ids, 0) | ops.equal(ops.arange(dim(output_ids, 0), dtype="int32"), 0)


def searched_ids(log_probs, output_ids=None):
    """int32 `(V,)` full-vocabulary id of each column of `log_probs`: `output_ids`, or 0..V-1 without a shortlist."""
    return ops.arange(dim(log_probs, -1), dtype="int32") if output_ids is None else output_ids


def vocabulary_ids(positions, output_ids=None):
    """Full-vocabulary ids of `positions` in the searched vocabulary (themselves without a shortlist)."""
    return positions if output_ids is None else ops.take(output_ids, positions)


class SearchedVocabulary(NamedTuple):
    """A shortlist's searched vocabulary as a search's steps use it (`searched_vocabulary`)."""
    ids: Any  # int32 (S,) full-vocabulary ids, then 0s (`decoding.shortlist.batch_vocabulary`)
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
        return ops.log_softmax(out.logits[:, 0], axis=-1), out.cache
    out = model.decode_step(tokens[:, None], cache, step, source_mask, output_ids=vocabulary.ids,
                            output_weights=vocabulary.weights, **options)
    logits = ops.where(vocabulary.slots, out.logits[:, 0], NEG_INF)  # (batch, S)
    return ops.log_softmax(logits, axis=-1), out.cache


def new_cache(model, memory, bound, growing=False):
    """The decoder cache of a search: `bound` preallocated self-attention slots, or (`growing`) a cache that each
    step extends.

    Preallocated slots keep every shape fixed, which XLA needs; but each step then writes one slot by copying the
    whole buffer, and attends to and reorders all `bound` slots. A growing cache reads and writes only the
    positions decoded so far: the faster choice in graph mode (docs/results.md), not compilable with XLA.
    """
    return model.init_cache(memory, None if growing else bound)


def encoded(model, source, bound, rows=1, growing=False):
    """The source mask and the decoder's initial cache (`new_cache`), each sentence's row repeated `rows` times
    (its beams; a Python int, or a scalar tensor in graph mode)."""
    source_mask = model.source_mask(source)
    cache = new_cache(model, model.encode(source, training=False), bound, growing)
    if isinstance(rows, int) and rows == 1:
        return source_mask, cache

    def repeat(tensor):
        return ops.repeat(tensor, rows, axis=0)

    return repeat(source_mask), map_rows(repeat, cache)


def row_inputs(source_mask, forced_prefix=None):
    """A search step's inputs with one row per decoder row: the source mask and, if any, the forced prefix."""
    return {"source_mask": source_mask, **({} if forced_prefix is None else {"forced_prefix": forced_prefix})}
