"""What the backend-neutral searches share, in `keras.ops`: output lengths, buffer writes, one cached step, the loop.

The conventions are those of `common.py` (the TensorFlow searches' pieces), which the neutral searches follow
exactly: a sentence generates at most `input length + max_extra_length` tokens, EOS included, and never more than
the *bound* (the static size of the token buffers and of the preallocated self-attention cache); PAD and BOS are
never generated. Every shape is static, and the loop is `keras.ops.while_loop`: `jax.lax.while_loop` on JAX, a
Python loop on PyTorch, `tf.while_loop` on TensorFlow.
"""

import keras
from keras import ops

from t2t_keras.decoding.parameters import DEFAULTS
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


def output_lengths(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None):
    """The buffer size (a Python int) and each sentence's longest output, int32 `(batch,)`.

    The bound is `max_length` when given, otherwise the padded source width plus `max_extra_length`, and at most
    `model.max_length`; a sentence's limit is its input length plus `max_extra_length`, within [1, bound].
    """
    if max_length is None:
        max_length = source.shape[1] + max_extra_length
    bound = max(1, min(int(max_length), model.max_length))
    lengths = ops.sum(ops.cast(ops.not_equal(source, model.pad_id), "int32"), axis=1)
    return bound, ops.clip(lengths + max_extra_length, 1, bound)


def step_counter():
    """The loop's int32 step counter at 0 (a strongly typed scalar, as `jax.lax.while_loop` needs)."""
    return ops.convert_to_tensor(0, "int32")


def write_at(buffer, index, values):
    """`buffer` (..., length) with column `index` replaced by `values` (...)."""
    columns = ops.arange(ops.shape(buffer)[-1], dtype="int32")
    return ops.where(ops.equal(columns, index), ops.expand_dims(ops.cast(values, buffer.dtype), -1), buffer)


def previous_tokens(sequences, step):
    """Decoder input at `step`: BOS first, then the token written at `step - 1`."""
    last = ops.take(sequences, ops.maximum(step - 1, 0), axis=-1)
    return ops.where(ops.equal(step, 0), ops.cast(BOS_ID, sequences.dtype), last)


def mask_special_tokens(log_probs, step, min_length=0):
    """Sets PAD and BOS always, and EOS before `min_length`, to -inf (see `common.mask_special_tokens`)."""
    vocab = ops.arange(ops.shape(log_probs)[-1], dtype="int32")
    early_eos = ops.logical_and(ops.equal(vocab, EOS_ID), step + 1 < min_length)
    forbidden = ops.equal(vocab, PAD_ID) | ops.equal(vocab, BOS_ID) | early_eos
    return ops.where(forbidden, ops.cast(NEG_INF, log_probs.dtype), log_probs)


def next_log_probs(model, tokens, source_mask, cache, step):
    """One cached decoder step: float32 log-probabilities `(batch, vocab)` and the new cache."""
    out = model.decode_step(ops.expand_dims(tokens, 1), cache, step, source_mask)
    return ops.log_softmax(out.logits[:, 0], axis=-1), out.cache


def encode_for_search(model, source, bound, rows=1):
    """The source mask and the decoder's initial cache, each sentence's rows repeated `rows` times (beams)."""
    source_mask = model.source_mask(source)
    cache = model.init_cache(model.encode(source, training=False), bound)
    if rows == 1:
        return source_mask, cache
    repeat = lambda x: ops.repeat(x, rows, axis=0)  # noqa: E731
    return repeat(source_mask), keras.tree.map_structure(repeat, cache)


def search_loop(step, state, done, bound):
    """Runs `state = step(state)` until every sentence is done (`state[done]`, bool `(batch,)`), at most `bound`
    times; `state` is a dict of tensors whose shapes and dtypes stay the same from step to step."""
    (state,) = ops.while_loop(
        lambda state: ops.logical_not(ops.all(state[done])),
        lambda state: (step(state),),
        (state,),
        maximum_iterations=bound,
    )
    return state
