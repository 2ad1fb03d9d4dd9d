"""Continuing prompts with a causal language model, through the translation decoders.

The prompt is fed as a forced prefix (`common.force_prefix`): the search loop
of `greedy_decode` (argmax or sampling) or `beam_search` emits the prompt's
tokens first, with log-probability 0, then continues freely. The model is a
`CausalLanguageModel`, whose `encode` hands the prompt through.
"""

import tensorflow as tf

from t2t_keras.decoding.beam_search import beam_search
from t2t_keras.decoding.common import source_lengths
from t2t_keras.decoding.greedy import greedy_decode
from t2t_keras.decoding.parameters import DEFAULTS, check_method


def continue_prompts(model, prompts, max_extra_length=DEFAULTS.max_extra_length, method="greedy",
                     beam_size=DEFAULTS.beam_size, alpha=DEFAULTS.alpha, temperature=0.0, top_k=0, seed=None,
                     max_length=None):
    """The continuation of each prompt, without the prompt.

    Args:
        model: a built `CausalLanguageModel`.
        prompts: int `(batch, width)` piece ids, 0-padded, without BOS or EOS;
            each row holds at least one piece.
        max_extra_length: a continuation stops after this many tokens (EOS included), a Python int.
        method: "greedy" (argmax, or sampling with `temperature` > 0 and
            `top_k`) or "beam" (`beam_size`, `alpha`; the best hypothesis).
        seed: seed of the sampler.
        max_length: static bound on prompt + continuation (the buffers' size); needed when
            `max_extra_length` is a tensor (an export's per-request parameter). Default: the
            prompt width + `max_extra_length`.

    Returns:
        dict with `tokens`: int32 `(batch, max_extra_length)`, each row the
        continuation, ending with EOS unless cut, then 0s; and `scores`:
        float32 `(batch,)` log-probability of the continuation (beam: its
        length-normalised score).
    """
    check_method(method)
    prompts = tf.convert_to_tensor(prompts, tf.int32)
    bound = max_length
    if bound is None and prompts.shape[1] is not None:
        bound = prompts.shape[1] + max_extra_length
    options = dict(max_extra_length=max_extra_length, max_length=bound, forced_prefix=prompts)
    if method == "beam":
        out = beam_search(model, prompts, beam_size=beam_size, alpha=alpha, **options)
        tokens, scores = out["tokens"][:, 0], out["scores"][:, 0]
    else:
        out = greedy_decode(model, prompts, temperature=temperature, top_k=top_k, seed=seed, **options)
        tokens, scores = out["tokens"], out["scores"]
    return {"tokens": _after_prompt(tokens, source_lengths(prompts), max_extra_length), "scores": scores}


def _after_prompt(tokens, prompt_lengths, count):
    """`(batch, count)`: each row of `tokens` from its prompt length on, 0 past the end."""
    columns = tf.range(count)[None, :] + prompt_lengths[:, None]
    width = tf.shape(tokens)[1]
    picked = tf.gather(tokens, tf.minimum(columns, width - 1), batch_dims=1)
    return tf.where(columns < width, picked, 0)
