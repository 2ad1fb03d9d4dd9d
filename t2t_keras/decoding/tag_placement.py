"""Placing a source sentence's tags in its translation, from word alignments.

Rules (positions are boundaries between target words, 0 … number of words):

- A paired tag covers the target words linked to any source word it covers:
  its opening goes before the first of them, its closing after the last
  (`min … max` of the linked positions, gaps included).
- A self-closing tag, and a paired tag whose words have no links (or that
  covers no word), goes after the last target word linked to the source word
  before it (`MarkedText.anchor_word`), searching back to earlier source words;
  at the start when none has a link. A paired tag placed so wraps no words
  (`<emph></emph>`), with its inner tags inside it.
- Nesting is kept by construction: a tag is clipped to its parent's range (a
  tag pushed out of it entirely shrinks to a point at the parent's nearer
  edge); siblings are taken by target start: one inside an earlier sibling's
  range nests inside it, one that crosses it is shortened to end where it
  starts or start where it ends (a point if nothing is left). A point strictly
  inside a sibling's range moves inside that sibling.

So every source tag appears exactly once in the output, well nested, and
removing the tags gives the translation's words joined by single spaces.
"""

import dataclasses

from t2t_keras.decoding.markup import join_pieces


@dataclasses.dataclass
class Placed:
    """A tag and its target boundaries `[start, end)`; `point`: it wraps no words (start == end)."""

    tag: object
    start: int
    end: int
    point: bool
    children: list

    @property
    def order(self):
        return self.tag.order


def target_ranges(marked, links):
    """A `Placed` tree mirroring `marked`'s tags, each at its desired (unarranged) target range."""
    linked = {}
    for i, j in links:
        linked.setdefault(i, []).append(j)

    def anchor(word):
        while word >= 0 and word not in linked:
            word -= 1
        return max(linked[word]) + 1 if word >= 0 else 0

    def build(tag):
        children = [build(child) for child in tag.children]
        targets = [] if tag.self_closing else [j for i in marked.covered_words(tag) for j in linked.get(i, ())]
        if targets:
            return Placed(tag, min(targets), max(targets) + 1, False, children)
        position = anchor(marked.anchor_word(tag.start))
        return Placed(tag, position, position, True, children)

    return [build(tag) for tag in marked.tags]


def _clip(item, lo, hi):
    item.start, item.end = min(max(item.start, lo), hi), min(max(item.end, lo), hi)
    if item.end <= item.start:
        item.point, item.end = True, item.start


def _collapse(items, position):
    """Makes `items` and all their descendants points at `position`."""
    for item in items:
        item.start = item.end = position
        item.point = True
        _collapse(item.children, position)
    return sorted(items, key=lambda item: item.order)


def _fit(item, kept):
    """The kept range that holds `item`, else None after shrinking `item` off every kept range it crosses."""
    for other in kept:
        if other.start <= item.start and item.end <= other.end:
            return other
        if item.start < other.end and other.start < item.end:
            if item.start < other.start:
                item.end = other.start
            else:
                item.start = other.end
    return None


def arrange(items, lo, hi):
    """`items` placed inside `[lo, hi)`, non-crossing and sorted, their children arranged inside them."""
    for item in items:
        _clip(item, lo, hi)
    kept, points = [], [i for i in items if i.point]
    for item in sorted((i for i in items if not i.point), key=lambda i: (i.start, -i.end, i.order)):
        host = _fit(item, kept)
        if host is not None:  # inside a sibling's range: nests there
            host.children.append(item)
        elif item.end <= item.start:  # nothing left of it: a point where it now starts
            _clip(item, lo, hi)
            points.append(item)
        else:
            kept.append(item)
            kept.sort(key=lambda i: i.start)
    level = []
    for item in points:
        host = next((k for k in kept if k.start < item.start < k.end), None)
        (host.children if host is not None else level).append(item)
    for item in kept:
        item.children = arrange(item.children, item.start, item.end)
    for item in level:
        item.children = _collapse(item.children, item.start)
    return sorted(kept + level, key=lambda i: (i.start, not i.point, i.order))


def render(items, words, lo, hi, out):
    """Appends to `out` the `join_pieces` items of `words[lo:hi]` with the arranged `items` around them."""
    position = lo
    for item in items:
        out.extend(("word", word) for word in words[position:item.start])
        if item.tag.self_closing:
            out.append(("empty", item.tag))
        else:
            out.append(("open", item.tag))
            render(item.children, words, item.start, item.end, out)
            out.append(("close", item.tag))
        position = item.end
    out.extend(("word", word) for word in words[position:hi])
    return out


def place_tags(marked, translation, links):
    """The translation with `marked`'s tags placed by `links` (`(i, j)`: source word i, target word j)."""
    words = translation.split()
    placed = arrange(target_ranges(marked, links), 0, len(words))
    return join_pieces(render(placed, words, 0, len(words), []))
