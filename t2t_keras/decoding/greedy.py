"""Greedy (and sampled) incremental decoding with the key/value cache, on every Keras backend.

The step is written in `keras.ops`; `loops` runs it over fixed-shape buffers (eagerly, inside `tf.function`,
inside `tf.function(jit_compile=True)`, under `jax.jit`, on PyTorch), or on TensorFlow in graph mode over a
growing cache that drops finished sentences (`growing_cache=True`):

    decode = tf.function(lambda source: greedy_decode(model, source), jit_compile=True)
"""

import functools

from keras import ops

from t2t_keras.decoding import common
from t2t_keras.decoding.loops import search_loop
from t2t_keras.decoding.request import DEFAULTS


def greedy_decode(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None, min_length=0,
                  temperature=0.0, top_k=0, seed=None, forced_prefix=None, output_ids=None, growing_cache=False,
                  max_output_length=None, end_at_limit=False, top_p=1.0, epsilon=0.0, sample_keys=None):
    """Decodes `source` one token at a time, choosing the argmax (or a sample) at each step.

    Args:
        model, source: a built `Transformer` (any `families.Searchable`); int `(batch, source_len)` ids, padded.
        max_extra_length: a sentence stops after `input length + max_extra_length` tokens (§6.1). May be a scalar
            or `(batch,)` tensor when `max_length` is given.
        max_length: static bound on the output length (and cache size); defaults to the padded source width +
            `max_extra_length`.
        min_length: the end id is forbidden until this many tokens exist (benchmarks use it to force a length).
            May be a tensor.
        temperature: 0 (a Python number) means argmax. Otherwise tokens are sampled from softmax(log p /
            temperature) (TensorFlow, `sampling`); a tensor value <= 0 still means argmax.
        top_k, top_p, epsilon, seed, sample_keys: the sampler's cuts (`sampling`: 0, 1.0, 0.0 keep every piece); its
            seed >= 0 (None draws one); int64 `(batch,)` keys of the rows' draws (None: `sampling.row_keys`).
        forced_prefix, output_ids: optional int `(batch, width)` ids, padded, emitted first (a language model's
            prompt, a multilingual model's target language; `common.force_prefix`); optional int32 `(S,)`
            searched vocabulary of a shortlist (`decoding.shortlist`).
        growing_cache: a growing cache, finished sentences dropped (`compaction`): graph mode.
        max_output_length, end_at_limit: a Python int, the longest output whatever the input's length (None: no
            such limit); a sentence's last allowed token is the end id (`common.force_end`).

    Returns: dict with `tokens`: int32 `(batch, bound)`, each row ending with the end id (unless cut at its
    length limit) followed by padding; and `scores`: float32 `(batch,)` model log-probability of the tokens.
    """
    source = ops.convert_to_tensor(source, "int32")
    ids = common.search_ids(model)
    bound, limits = common.output_lengths(model, source, max_extra_length, max_length, max_output_length)
    source_mask, state = _start(model, source, bound, ids, growing_cache)
    choose = _chooser(temperature, top_k, top_p, epsilon, seed, sample_keys, source, ids.pad)
    step = functools.partial(greedy_step, model, min_length=min_length, choose=choose, ids=ids,
                             vocabulary=common.searched_vocabulary(model, output_ids), growing=growing_cache,
                             end_at_limit=end_at_limit)
    state = _run(step, state, bound, limits, common.row_inputs(source_mask, forced_prefix),
                 growing_cache and _is_argmax(temperature), growing_cache)
    return {"tokens": state["tokens"], "scores": state["scores"]}


def _start(model, source, bound, ids, growing):
    """The source mask and the search's initial state: the source encoded once, nothing written yet."""
    source_mask, cache = common.encoded(model, source, bound, growing=growing)
    return source_mask, _initial_state(common.dim(source, 0), bound, cache, ids)


def _initial_state(batch, bound, cache, ids):
    """Nothing written yet: `(batch, bound)` token buffers of padding, zero scores, no sentence finished."""
    return {
        "step": ops.convert_to_tensor(0, "int32"),  # a strongly typed scalar, as `jax.lax.while_loop` needs
        "tokens": ops.full((batch, bound), ids.pad, "int32"),
        "scores": ops.zeros((batch,), "float32"),
        "finished": ops.zeros((batch,), "bool"),
        "cache": cache,
    }


def _is_argmax(temperature):
    """True when `temperature` is a Python number <= 0, which means plain argmax."""
    return isinstance(temperature, (int, float)) and temperature <= 0


def _chooser(temperature, top_k, top_p, epsilon, seed, keys, source, pad):
    """`choose(log_probs, step) -> tokens`, how each step picks its token: the argmax when `temperature` is a
    Python number <= 0 (`_is_argmax`), otherwise a seeded sample (`_sampler`)."""
    if _is_argmax(temperature):
        return _argmax
    return _sampler(temperature, top_k, top_p, epsilon, seed, keys, source, pad)


def _argmax(log_probs, step):
    """`(batch,)` int32 most likely tokens (lowest id on ties)."""
    return common.argmax_ids(log_probs)


def _sampler(temperature, top_k, top_p, epsilon, seed, keys, source, pad):
    """`choose(log_probs, step) -> tokens`: a seeded sampler (`sampling`: draws repeatable per row key; `keys`
    None: a hash of each row of `source`, `sampling.row_keys`)."""
    from t2t_keras.decoding import sampling

    base_seed = sampling.random_seed() if seed is None else seed
    keys = sampling.row_keys(source, pad) if keys is None else keys

    def choose(log_probs, step):
        return sampling.sample_tokens(log_probs, base_seed, step, keys, temperature, top_k, top_p, epsilon)

    return choose


def _run(step, state, bound, limits, row_inputs, compact, growing):
    """The search loop: one that drops finished sentences (`compact`, graph mode), or a plain one (over a growing
    cache if `growing`). A sampler keeps every row in the batch: its draw keys follow the rows' places."""
    if compact:
        from t2t_keras.decoding.compaction import compacting_loop  # graph mode

        return compacting_loop(step, state, ("tokens", "scores", "finished"), bound, {"limits": limits}, row_inputs,
                               done="finished")
    return search_loop(functools.partial(step, limits=limits, **row_inputs), state, "finished", bound, growing)


def greedy_step(model, state, source_mask, limits, min_length, choose, ids, forced_prefix=None, vocabulary=None,
                growing=False, end_at_limit=False):
    """Feeds the previous token, picks the next one and marks finished sentences (over a shortlist's
    `vocabulary`, `common.searched_vocabulary`, if any)."""
    step, finished = state["step"], state["finished"]
    output_ids = None if vocabulary is None else vocabulary.ids
    inputs = common.previous_tokens(state["tokens"], step, ids)
    log_probs, cache = common.next_log_probs(model, inputs, source_mask, state["cache"], step, vocabulary, growing)
    log_probs = common.next_token_log_probs(log_probs, step, ids, limits, 1, min_length, forced_prefix, end_at_limit,
                                            output_ids)
    choice = ops.where(finished, 0, choose(log_probs, step))  # a column of log_probs, 0 once finished
    token = ops.where(finished, ids.pad, common.vocabulary_ids(choice, output_ids))
    token_log_prob = common.gather_rows(log_probs, choice[:, None])[:, 0]
    return {
        "step": step + 1,
        "tokens": common.write_at(state["tokens"], step, token),
        "scores": state["scores"] + ops.where(finished, 0.0, token_log_prob),
        "finished": finished | ops.equal(token, ids.end) | (step + 1 >= limits),
        "cache": cache,
    }
