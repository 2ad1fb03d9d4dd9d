"""The one call every generator makes: a request's search of a padded batch, greedy or beam, with constraints.

    result = search(model, source, beam_size=4, alpha=0.6, max_extra_length=50, num_return=2)
    result.tokens    # int32 (batch, num_return, bound), best first
    result.scores    # float32 (batch, num_return)

A run's generator (`generator`) and the searches inside an export (`export.search_table`) both call it, so a
beam of one is greedy search everywhere, and a batch with constraints is searched by the constraint rule
(`constrained`; its beam of one ranks without length penalty, greedy search for the lines without terms).
"""

from typing import Any, NamedTuple

from keras import ops

from t2t_keras.decoding.beams import beam_search
from t2t_keras.decoding.greedy import greedy_decode
from t2t_keras.decoding.request import DEFAULTS

PER_ROW = ("forced_prefix", "max_extra_length")  # the search arguments that may hold a value per row


class SearchResult(NamedTuple):
    """`tokens` int32 `(batch, n, bound)` and `scores` float32 `(batch, n)`, best first; `satisfied` bool
    `(batch,)` where the search had constraints (false: no hypothesis holds them all), else None."""

    tokens: Any
    scores: Any
    satisfied: Any = None


def search(model, source, beam_size=DEFAULTS.beam_size, num_return=1, alpha=DEFAULTS.alpha,
           length_penalty=DEFAULTS.length_penalty, max_extra_length=DEFAULTS.max_extra_length, max_length=None,
           stopping=DEFAULTS.stopping, output_ids=None, constraints=None, growing_cache=False, temperature=0.0,
           top_k=0, seed=None, forced_prefix=None, max_output_length=None, end_at_limit=False, top_p=1.0, epsilon=0.0):
    """The `SearchResult` of `source` (int `(batch, width)`, padded, each row ending with the end id).

    A Python `beam_size` of 1 is greedy search (argmax, or a sample at `temperature` > 0), whose n-best list is
    its one hypothesis, or, sampling, `num_return` samples per row (`samples`); any other `beam_size` (a tensor
    too, in graph mode) a beam search. `constraints`: int
    `(batch, C, L)` target ids (`constrained`), not with sampling or a shortlist. `forced_prefix`: int
    `(batch, width)` ids every output starts with, or `(width,)` for every row alike (a multilingual model's target
    language). The other arguments are those of `greedy.greedy_decode` and `beam_search.beam_search`.
    """
    greedy = isinstance(beam_size, int) and beam_size == 1
    shared = dict(max_extra_length=max_extra_length, max_length=max_length, growing_cache=growing_cache,
                  max_output_length=max_output_length, end_at_limit=end_at_limit,
                  forced_prefix=_rows(forced_prefix, source))
    if constraints is not None:
        from t2t_keras.decoding.constrained import constrained_beam_search  # TensorFlow

        out = constrained_beam_search(model, source, constraints, beam_size=beam_size, alpha=alpha,
                                      length_penalty="none" if greedy else length_penalty, num_return=num_return,
                                      stopping=stopping, **shared)
        return SearchResult(out["tokens"], out["scores"], out["satisfied"])
    if greedy:
        sampler = dict(temperature=temperature, top_k=top_k, top_p=top_p, epsilon=epsilon, seed=seed,
                       output_ids=output_ids)
        if not isinstance(num_return, int) or num_return > 1:
            return samples(model, source, num_return, sampler, shared)
        out = greedy_decode(model, source, **sampler, **shared)
        return SearchResult(ops.expand_dims(out["tokens"], 1), ops.expand_dims(out["scores"], 1))
    out = beam_search(model, source, beam_size=beam_size, alpha=alpha, length_penalty=length_penalty,
                      num_return=num_return, stopping=stopping, output_ids=output_ids, **shared)
    return SearchResult(out["tokens"], out["scores"])


def samples(model, source, count, sampler, shared):
    """The `SearchResult` of `count` samples of each row (TensorFlow; `count` may be a tensor): the rows repeated
    `count` times, each copy drawn with its own key (`sampling.row_keys`), most likely sample first."""
    import tensorflow as tf

    from t2t_keras.decoding.common import search_ids
    from t2t_keras.decoding.sampling import row_keys

    rows = tf.shape(source)[0]
    repeated = {name: tf.repeat(value, count, axis=0) if name in PER_ROW and len(getattr(value, "shape", ())) else
                value for name, value in shared.items()}
    out = greedy_decode(model, tf.repeat(source, count, axis=0), sample_keys=row_keys(source, search_ids(model).pad,
                                                                                     count), **sampler, **repeated)
    tokens = tf.reshape(out["tokens"], [rows, count, -1])  # (batch, count, bound)
    scores = tf.reshape(out["scores"], [rows, count])
    order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
    return SearchResult(tf.gather(tokens, order, batch_dims=1), tf.gather(scores, order, batch_dims=1))


def _rows(forced_prefix, source):
    """A forced prefix with a row per source row: `(width,)` ids repeated, or `(batch, width)` as given."""
    if forced_prefix is None:
        return None
    forced_prefix = ops.convert_to_tensor(forced_prefix, "int32")
    if len(forced_prefix.shape) == 2:
        return forced_prefix
    return ops.tile(forced_prefix[None, :], (ops.shape(source)[0], 1))


def request_options(request):
    """The `search` arguments a `GenerationRequest` sets (beam size and n-best length, penalty, limits, sampling)."""
    return dict(beam_size=request.beam_size, num_return=request.num_return, alpha=request.alpha,
                length_penalty=request.length_penalty, max_extra_length=request.max_extra_length,
                stopping=request.stopping, max_output_length=request.max_output_length,
                end_at_limit=request.end_at_limit, temperature=request.temperature, top_k=request.top_k,
                top_p=request.top_p, epsilon=request.epsilon, seed=request.seed)
