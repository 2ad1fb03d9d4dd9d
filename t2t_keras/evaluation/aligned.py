"""`translate --alignments` and `translate --markup`: translations with word alignments, or with the source's
inline tags placed in them (`decoding.alignment`, `decoding.tag_placement`).

Each output line is the translation (with `--markup`, the translation with the
tags) and, with `--alignments`, a TAB and the Pharaoh links `i-j` (source word
i, target word j, 0-based, words split at whitespace; with `--markup`, the
words of the text without its tags).

Any artifact whose request takes `alignments` does: a run (its model's
cross-attention) and a text SavedModel export (the Keras model it keeps in
`assets.extra/`), with the layer, heads and rows of the request.
"""

from t2t_keras.decoding.alignment import format_pharaoh
from t2t_keras.decoding.markup import parse_markup
from t2t_keras.decoding.tag_placement import place_tags


def parse_lines(lines, origin="<stdin>"):
    """The `MarkedText` of each line; the first bad one is a `MarkupError` naming its line and tag."""
    return [parse_markup(line, f"{origin}:{number}") for number, line in enumerate(lines, start=1)]


def aligned_translations(artifact, lines, request, markup=False, origin="<stdin>"):
    """Output lines of `translate --alignments` / `--markup` for `lines` (see the module docstring): `request`
    (with `alignments` set) is generated once the markup of every line has been checked."""
    marked = parse_lines(lines, origin) if markup else None
    sources = [m.plain for m in marked] if markup else list(lines)
    generation = artifact.generate(sources, artifact.check_request(request.updated(alignments=True)))
    out = []
    for index, (translation, links) in enumerate(zip(generation.best, generation.alignments)):
        text = place_tags(marked[index], translation, links) if markup else translation
        out.append(f"{text}\t{format_pharaoh(links)}" if request.alignments else text)
    return out
