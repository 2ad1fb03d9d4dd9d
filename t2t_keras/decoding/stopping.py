"""When a beam search is done with a sentence: the rules of `decoding.stopping`.

Every rule counts a hypothesis as finished only when it ends (EOS, or its length limit) while ranking among the
`beam_size` best candidates of its step, i.e. while it would have taken a beam slot (`beam_search`), and every rule
stops a sentence at its length limit. Before that:

* `"beam"`: once `PATIENCE × beam_size` hypotheses have finished. fairseq and CTranslate2 stop at `beam_size`
  (a patience of 1); Kasai et al. (2022, "A Call for Clarity in Beam Search") show that a larger patience factor
  gains quality at little cost; on the default corpus 2 gave the distilled student +0.24 BLEU over 1 for about
  a tenth of its speed (bench/results/history.md, "Beam search that stops when the beam is spent"). The n-best list is
  the best of the finished hypotheses; a longer one still alive might have scored higher after the length
  penalty, so the list can differ from the exact one. The search stops soon after the longest translation of a
  batch has ended, or earlier, when the exact bound below already settles the list (which then is the one the
  count would give).
* `"exact"`: once the `num_return`-th best finished score beats the best score any alive hypothesis can still
  reach (log-probabilities only fall as a hypothesis grows and lp(Y) is monotonic in |Y|, so its bound is its
  log-probability normalised at the shortest or the longest length left). Stopping never changes the n-best
  list, but with the "gnmt" penalty and a distant length limit the bound is loose and a sentence runs on for
  many steps after its translation has ended.
* `"transformers"`, `"transformers_early"`, `"transformers_never"`: Hugging Face `generate`'s rules for its
  `early_stopping` False (its default), True and "never" (transformers 5's `_beam_search`: `_update_finished_beams`,
  `_check_early_stop_heuristic`). A sentence's `beam_size` finished slots must all hold a hypothesis (a finite
  score); then `_early` is done, and the other two once the best alive hypothesis, normalised at the length it has
  now (`"transformers"`) or, `_never`, at the length that favours it most (the limit for a positive alpha, its
  current length otherwise), does not beat the worst finished one. With the `"power"` length penalty these give
  the hypotheses `generate(num_beams=...)` gives.

Written in `keras.ops`, as the beam search's step (`beams.py`) that calls it on every backend.
"""

from keras import ops

PATIENCE = 2  # the "beam" rule: a sentence is done once PATIENCE * beam_size hypotheses have finished


def finished_enough(beam_size):
    """How many finished hypotheses settle a sentence under the "beam" rule."""
    return PATIENCE * beam_size


def settled(rule, finished_count, finished_scores, best_alive_log_prob, step, limits, scoring, num_return):
    """bool `(batch,)`: the sentences whose n-best list `rule` considers settled after `step + 1` tokens.

    Args:
        rule: `"beam"` or `"exact"`.
        finished_count: int32 `(batch,)` hypotheses finished so far.
        finished_scores: `(batch, beam_size)` the finished set's normalised scores, best first.
        best_alive_log_prob: `(batch,)` the log-probability of the best hypothesis still alive.
        step: the step just taken (0 for the first token).
        limits: int32 `(batch,)` each sentence's longest output.
        scoring: `scoring(log_prob, length)`, the normalised score.
        num_return: size of the n-best list.
    """
    shortest = scoring(best_alive_log_prob, step + 1)
    best_possible = ops.maximum(shortest, scoring(best_alive_log_prob, limits))
    if rule.startswith("transformers"):
        worst = finished_scores[:, -1]  # the beam_size-th finished slot, -inf while it holds none
        full = worst > float("-inf")
        if rule == "transformers_early":
            return full
        return full & ((shortest if rule == "transformers" else best_possible) <= worst)
    exact = finished_scores[:, num_return - 1] > best_possible
    if rule == "beam":
        return exact | (finished_count >= finished_enough(ops.shape(finished_scores)[1]))  # static, or a tensor
    return exact
