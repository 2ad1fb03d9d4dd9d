"""Continuing prompts with a causal language model, through the translation searches.

The prompt is fed as a forced prefix (`common.force_prefix`): the search (`searches.search`: greedy, argmax or
sampling, or beam) emits the prompt's tokens first, with log-probability 0, then continues freely. The model
is a `CausalLanguageModel`, whose `encode` hands the prompt through.
"""

import tensorflow as tf

from t2t_keras.decoding.common import source_lengths
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.searches import search


def continue_prompts(model, prompts, max_extra_length=DEFAULTS.max_extra_length, beam_size=1,
                     max_length=None, **options):
    """The continuation of each prompt, without the prompt.

    Args:
        model: a built `CausalLanguageModel`.
        prompts: int `(batch, width)` piece ids, 0-padded, without start or end ids;
            each row holds at least one piece.
        max_extra_length: a continuation stops after this many tokens (end id included), a Python int.
        beam_size: 1 is greedy search (argmax, or sampling with `temperature` > 0 and `top_k`); more a beam
            search (`alpha`, `length_penalty`; the best hypothesis).
        max_length: static bound on prompt + continuation (the buffers' size); needed when
            `max_extra_length` is a tensor (an export's per-request parameter). Default: the
            prompt width + `max_extra_length`.
        options: more `searches.search` arguments (`alpha`, `temperature`, `top_k`, `seed`, ...).

    Returns:
        dict with `tokens`: int32 `(batch, max_extra_length)`, each row the
        continuation, ending with the end id unless cut, then 0s; and `scores`:
        float32 `(batch,)` log-probability of the continuation (beam: its
        length-normalised score).
    """
    prompts = tf.convert_to_tensor(prompts, tf.int32)
    bound = max_length
    if bound is None and prompts.shape[1] is not None:
        bound = prompts.shape[1] + max_extra_length
    options.pop("num_return", None)  # the best continuation only
    out = search(model, prompts, beam_size=beam_size, max_extra_length=max_extra_length, max_length=bound,
                 forced_prefix=prompts, **options)
    tokens = out.tokens[:, 0]
    return {"tokens": _after_prompt(tokens, source_lengths(prompts), max_extra_length), "scores": out.scores[:, 0]}


def _after_prompt(tokens, prompt_lengths, count):
    """`(batch, count)`: each row of `tokens` from its prompt length on, 0 past the end."""
    columns = tf.range(count)[None, :] + prompt_lengths[:, None]
    width = tf.shape(tokens)[1]
    picked = tf.gather(tokens, tf.minimum(columns, width - 1), batch_dims=1)
    return tf.where(columns < width, picked, 0)
