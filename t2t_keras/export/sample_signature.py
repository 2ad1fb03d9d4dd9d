"""The `sample` signature of a translation export: N samples per sentence (`decoding.sampling`) in the graph.

    sample(inputs, num_return, max_extra_length, temperature, top_k, top_p, epsilon, seed)
        -> translations tf.string (N, num_return), scores float32 (N, num_return), truncated bool (N,)

(a multilingual export's also takes `src_lang` and `tgt_lang`, last). Each sentence's `num_return` samples come
from greedy search at `temperature` (0: argmax) among the pieces top-k (0: all), top-p (1: all) and epsilon (0:
all) keep, most likely sample first; `scores` are the samples' model log-probabilities. `seed` >= 0 makes the
draws repeatable: the same sentence, seed and settings give the same samples as through the run directory
(`t2t-keras translate --run-dir`); a negative seed draws a fresh one per call. The search runs in graph mode over
a growing cache, whatever the export's `jit_compile`.

A SavedModel signature has no optional inputs, so sampling is a signature of its own beside `translate`, whose
inputs are unchanged: callers of `translate` and exports written before `sample` existed keep working (an
export without it refuses sampling requests, `artifacts.saved_model`).
"""

import tensorflow as tf

from t2t_keras.decoding import searches
from t2t_keras.decoding.parameters import MAX_SAMPLES
from t2t_keras.decoding.sampling import random_seed
from t2t_keras.export.signature_functions import scalar_specs

SAMPLE = "sample"  # the signature's name
SAMPLE_SPECS = scalar_specs(num_return=tf.int32, max_extra_length=tf.int32, temperature=tf.float32, top_k=tf.int32,
                            top_p=tf.float32, epsilon=tf.float32, seed=tf.int32)


def sampling_checks(num_return, max_extra_length, temperature, top_k, top_p, epsilon):
    """Assertions that fail with a message naming the parameter and its allowed range."""
    return [
        tf.debugging.Assert((num_return >= 1) & (num_return <= MAX_SAMPLES),
                            [f"num_return must be in [1, {MAX_SAMPLES}]. Received: num_return=", num_return]),
        tf.debugging.Assert(max_extra_length >= 0,
                            ["max_extra_length must be >= 0. Received: max_extra_length=", max_extra_length]),
        tf.debugging.Assert(temperature >= 0.0, ["temperature must be >= 0. Received: temperature=", temperature]),
        tf.debugging.Assert(top_k >= 0, ["top_k must be >= 0. Received: top_k=", top_k]),
        tf.debugging.Assert((top_p > 0.0) & (top_p <= 1.0), ["top_p must be in (0, 1]. Received: top_p=", top_p]),
        tf.debugging.Assert((epsilon >= 0.0) & (epsilon < 1.0),
                            ["epsilon must be in [0, 1). Received: epsilon=", epsilon]),
    ]


def sample_search(model, source, num_return, max_extra_length, sampler, bound, **options):
    """Tokens `(batch, num_return, bound)` and scores `(batch, num_return)` of `num_return` samples of each row of
    `source` (prepared ids), most likely first.

    `sampler`: dict of `temperature`, `top_k`, `top_p`, `epsilon` and `seed` (scalar tensors; a negative seed draws
    a fresh one); `bound`: the output buffers' width; `options`: more `searches.search` arguments (`output_ids`,
    `forced_prefix`, `max_output_length`, `end_at_limit`).
    """
    seed = sampler["seed"]
    sampler = dict(sampler, seed=tf.where(seed >= 0, seed, random_seed()))
    result = searches.search(model, source, beam_size=1, num_return=num_return, max_extra_length=max_extra_length,
                             max_length=bound, growing_cache=True, **sampler, **options)
    return result.tokens, result.scores
