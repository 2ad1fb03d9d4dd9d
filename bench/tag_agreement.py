"""Agreement of placed tags with a human translation's tags (`bench/bench_markup.py`).

The source's tags are placed on the words of the reference translation (from
an alignment of the source with the reference) and compared, tag by tag, with
the tags the translator put there. Tags are matched by their text and rank
among equal texts (the second `<emph>` with the second `<emph>`); tags found
on one side only are counted, not scored. A paired tag scores the F1 of the
word sets the two wrap (1 when both wrap no word); a self-closing tag scores 1
when it follows the same word.
"""

import collections
import typing

import numpy as np

from t2t_keras.decoding.markup import parse_markup
from t2t_keras.decoding.tag_placement import place_tags


class TagScore(typing.NamedTuple):
    name: str  # the tag's name, e.g. "emph"
    self_closing: bool
    f1: float
    exact: bool


def tag_words(marked):
    """`{(opening text, rank): words}`: the set of covered word indices of a paired tag, the anchor word of a
    self-closing one."""
    ranks, found = collections.Counter(), {}
    for tag in marked.tag_list():
        key = (tag.open_text, ranks[tag.open_text])
        ranks[tag.open_text] += 1
        found[key] = (tag, marked.anchor_word(tag.start) if tag.self_closing else frozenset(marked.covered_words(tag)))
    return found


def word_f1(predicted, reference):
    """F1 of two word sets; 1.0 when both are empty."""
    if not predicted and not reference:
        return 1.0
    common = len(predicted & reference)
    return 2.0 * common / (len(predicted) + len(reference))


def score_tags(placed, reference):
    """`(scores, unmatched)`: a `TagScore` per tag of the reference also in `placed` (both `MarkedText`), and
    the number of tags on one side only."""
    predicted, wanted = tag_words(placed), tag_words(reference)
    scores = []
    for key in sorted(wanted.keys() & predicted.keys()):
        tag, words = wanted[key]
        if tag.self_closing:
            same = words == predicted[key][1]
            scores.append(TagScore(tag.name, True, float(same), same))
        else:
            f1 = word_f1(predicted[key][1], words)
            scores.append(TagScore(tag.name, False, f1, predicted[key][1] == words))
    return scores, len(wanted.keys() ^ predicted.keys())


def transfer_scores(pairs, links):
    """`(scores, unmatched)` over `MarkedPair`s, the source's tags placed on the reference's words by `links`
    (one list of `(i, j)` per pair, between the two plain texts)."""
    scores, unmatched = [], 0
    for pair, pair_links in zip(pairs, links):
        source, reference = parse_markup(pair.source, pair.page), parse_markup(pair.target, pair.page)
        placed = parse_markup(place_tags(source, reference.plain, pair_links))
        found, missing = score_tags(placed, reference)
        scores += found
        unmatched += missing
    return scores, unmatched


def summarize(scores, unmatched=0):
    """`{"tags", "unmatched", "f1", "exact", "by_name": {name: {"tags", "f1", "exact"}}}` of `TagScore`s."""
    def summary(items):
        return {"tags": len(items), "f1": float(np.mean([s.f1 for s in items])) if items else None,
                "exact": float(np.mean([s.exact for s in items])) if items else None}

    names = sorted({score.name for score in scores})
    return {**summary(scores), "unmatched": unmatched,
            "by_name": {name: summary([s for s in scores if s.name == name]) for name in names}}
