"""Greedy (and sampled) incremental decoding with the key/value cache.

The whole search is one `tf.while_loop` over fixed-shape buffers, so it runs
eagerly, inside `tf.function`, and inside `tf.function(jit_compile=True)`
(with `growing_cache=True`, the one buffer that grows, not with XLA):

    decode = tf.function(lambda source: greedy_decode(model, source), jit_compile=True)
"""

import functools

import tensorflow as tf

from t2t_keras.decoding import common, sampling
from t2t_keras.decoding.compaction import compacting_loop
from t2t_keras.decoding.parameters import DEFAULTS
from t2t_keras.decoding.shortlist import vocabulary_ids


def greedy_decode(model, source, max_extra_length=DEFAULTS.max_extra_length, max_length=None, min_length=0,
                  temperature=0.0, top_k=0, seed=None, forced_prefix=None, output_ids=None, growing_cache=False):
    """Decodes `source` one token at a time, choosing the argmax (or a sample) at each step.

    Args:
        model: a built `Transformer`.
        source: int `(batch, source_len)` ids, padded with 0, each row ending with EOS.
        max_extra_length: a sentence stops after `input length + max_extra_length`
            tokens (§6.1). May be a scalar or `(batch,)` tensor when `max_length` is given.
        max_length: static bound on the output length (and cache size); defaults
            to the padded source width + `max_extra_length`.
        min_length: EOS is forbidden until this many tokens exist (benchmarks use
            it to force a length). May be a tensor.
        temperature: 0 (a Python number) means argmax. Otherwise tokens are sampled from
            softmax(log p / temperature); a tensor value <= 0 still means argmax.
        top_k: when sampling, only the k most likely tokens are candidates; 0 keeps all.
        seed: int seed of the stateless sampler; None draws one.
        forced_prefix: optional int `(batch, width)` ids, 0-padded, emitted first whatever the model prefers (a
            language model's prompt; see `common.force_prefix`).
        output_ids: optional int32 `(S,)` searched vocabulary of a shortlist
            (`decoding.shortlist.batch_vocabulary`); None searches the whole vocabulary.
        growing_cache: a growing cache (`common.new_cache`), finished sentences dropped (`compaction`): graph mode.

    Returns:
        dict with `tokens`: int32 `(batch, bound)`, each row ending with EOS
        (unless cut at its length limit) followed by 0s; and `scores`: float32
        `(batch,)` model log-probability of the tokens (untempered).
    """
    source = tf.convert_to_tensor(source, tf.int32)
    bound, limits = common.output_lengths(model, source, max_extra_length, max_length)
    source_mask = model.source_mask(source)
    cache = common.new_cache(model, model.encode(source, training=False), bound, growing_cache)
    choose = _chooser(temperature, top_k, seed)
    state = _initial_state(tf.shape(source)[0], bound, cache)
    step = functools.partial(_greedy_step, model, min_length=min_length, choose=choose,
                             vocabulary=common.searched_vocabulary(model, output_ids), growing=growing_cache)
    # a sampler keeps every row in the batch: a row's random draws depend on its place in the batch
    compact = growing_cache and sampling.is_argmax(temperature)
    state = _run(step, state, bound, limits, common.row_inputs(source_mask, forced_prefix), compact, growing_cache)
    return {"tokens": state["tokens"], "scores": state["scores"]}


def _run(step, state, bound, limits, row_inputs, compact, growing):
    """The search loop: one that drops finished sentences (`compact`, graph mode), or a plain one (over a growing
    cache if `growing`)."""
    if compact:
        return compacting_loop(step, state, ("tokens", "scores", "finished"), bound, {"limits": limits}, row_inputs,
                               done="finished")
    return common.search_loop(functools.partial(step, limits=limits, **row_inputs), state, "finished", bound, growing)


def _initial_state(batch, bound, cache):
    """Nothing written yet: empty `(batch, bound)` token buffers, zero scores, no sentence finished."""
    return {
        "step": tf.constant(0),
        "tokens": tf.zeros((batch, bound), tf.int32),
        "scores": tf.zeros((batch,), tf.float32),
        "finished": tf.zeros((batch,), tf.bool),
        "cache": cache,
    }


def _chooser(temperature, top_k, seed):
    """`choose(log_probs, step) -> tokens`: argmax, or a seeded sampler."""
    if sampling.is_argmax(temperature):
        return lambda log_probs, step: sampling.argmax_tokens(log_probs)
    base_seed = sampling.random_seed() if seed is None else seed

    def choose(log_probs, step):
        return sampling.sample_tokens(log_probs, sampling.step_seed(base_seed, step), temperature, top_k)

    return choose


def _greedy_step(model, state, source_mask, limits, min_length, choose, forced_prefix=None, vocabulary=None,
                 growing=False):
    """Feeds the previous token, picks the next one and marks finished sentences (over a shortlist's
    `vocabulary`, `common.searched_vocabulary`, if any)."""
    step, finished = state["step"], state["finished"]
    output_ids = None if vocabulary is None else vocabulary.ids
    inputs = common.previous_tokens(state["tokens"], step)
    log_probs, cache = common.next_log_probs(model, inputs, source_mask, state["cache"], step, vocabulary, growing)
    log_probs = common.mask_special_tokens(log_probs, step, min_length, output_ids)
    if forced_prefix is not None:
        log_probs = common.force_prefix(log_probs, step, forced_prefix, output_ids)
    choice = tf.where(finished, 0, choose(log_probs, step))  # a column of log_probs; column 0 is PAD_ID
    token = vocabulary_ids(choice, output_ids)
    token_log_prob = tf.gather(log_probs, choice, batch_dims=1)
    finished = finished | tf.equal(token, common.EOS_ID) | (step + 1 >= limits)
    return {
        "step": step + 1,
        "tokens": common.write_at(state["tokens"], step, token),
        "scores": state["scores"] + tf.where(state["finished"], 0.0, token_log_prob),
        "finished": finished,
        "cache": cache,
    }
