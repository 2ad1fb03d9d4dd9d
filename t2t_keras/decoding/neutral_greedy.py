"""Greedy decoding in `keras.ops`, on every Keras backend (JAX, PyTorch, TensorFlow).

The search of `greedy.py` (argmax at each step, the same length limits and special-token rules, so the same
tokens) over fixed-shape buffers and the model's preallocated cache, in one `keras.ops.while_loop`. On JAX,
`neutral_compile.compiled(model, greedy_search)` compiles it with `jax.jit`.
"""

import functools

from keras import ops

from t2t_keras.decoding import neutral_steps as steps
from t2t_keras.decoding.parameters import DEFAULTS
from t2t_keras.special_ids import EOS_ID


def greedy_search(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None, min_length=0):
    """Decodes `source` one token at a time, choosing the most likely token at each step.

    Args:
        model: a built `Transformer`.
        source: int `(batch, source_len)` ids, padded with 0, each row ending with EOS.
        max_extra_length: a sentence stops after `input length + max_extra_length` tokens (§6.1).
        max_length: static bound on the output length (and cache size); defaults to the padded source width +
            `max_extra_length`.
        min_length: EOS is forbidden until this many tokens exist.

    Returns:
        dict with `tokens`: int32 `(batch, bound)`, each row ending with EOS (unless cut at its length limit)
        followed by 0s; and `scores`: float32 `(batch,)` model log-probability of the tokens.
    """
    source = ops.convert_to_tensor(source, "int32")
    bound, limits = steps.output_lengths(model, source, max_extra_length, max_length)
    source_mask, cache = steps.encode_for_search(model, source, bound)
    batch = ops.shape(source)[0]
    state = {
        "step": steps.step_counter(),
        "tokens": ops.zeros((batch, bound), "int32"),
        "scores": ops.zeros((batch,), "float32"),
        "finished": ops.zeros((batch,), "bool"),
        "cache": cache,
    }
    step = functools.partial(_greedy_step, model, source_mask=source_mask, limits=limits, min_length=min_length)
    state = steps.search_loop(step, state, "finished", bound)
    return {"tokens": state["tokens"], "scores": state["scores"]}


def _greedy_step(model, state, source_mask, limits, min_length):
    """Feeds the previous token, picks the next one and marks finished sentences."""
    step, finished = state["step"], state["finished"]
    inputs = steps.previous_tokens(state["tokens"], step)
    log_probs, cache = steps.next_log_probs(model, inputs, source_mask, state["cache"], step)
    log_probs = steps.mask_special_tokens(log_probs, step, min_length)
    token = ops.where(finished, 0, ops.cast(ops.argmax(log_probs, axis=-1), "int32"))  # 0 is PAD_ID
    token_log_prob = ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(token, -1), axis=-1), -1)
    return {
        "step": step + 1,
        "tokens": steps.write_at(state["tokens"], step, token),
        "scores": state["scores"] + ops.where(finished, 0.0, token_log_prob),
        "finished": finished | ops.equal(token, EOS_ID) | (step + 1 >= limits),
        "cache": cache,
    }
