"""Help paragraphs with their inline markup, for measuring tag transfer (`bench_markup.py`).

It lives beside the benchmarks that use it (through `help_test_pairs.py`); nothing in the package imports it.
`tests/test_markup.py` checks it against `t2t_keras.data.help_html`, whose paragraph walk it reuses.

The compiled help keeps the inline markup of the ``.xhp`` sources as HTML;
it is mapped back to a small set of tags named as in the sources:

    <span class="emph">                       <emph>
    <span class="menuitem"> (and literal,      <item type="menuitem">
      input, keycode, productname, widget,
      acronym)
    <span class="avis"> (the sources' ahelp)   <ahelp>
    <a href="en-US/text/...">                  <link href="text/...">  (the language prefix dropped,
                                                                        so English and German hrefs match)
    <br>                                       <br/>
    <img src="...">                            <image src="..."/>

Other inline elements (spans of no such class, platform switches: only the
default alternative is kept, as in `help_html`) give their text without a
tag; a tag around no text is dropped. Text is escaped (`&lt;`, `&amp;`), so a
marked paragraph reads with `decoding.markup.parse_markup`, and its text
without the tags is exactly `help_html.element_text` of the paragraph.
Whitespace is normalised as there; a space at a tag's edge goes outside it
(`Choose <item type="menuitem">File - New</item>.`).
"""

import html
import re
import typing
import unicodedata

from t2t_keras.data import help_html, libreoffice

ITEM_CLASSES = frozenset({"menuitem", "literal", "input", "keycode", "productname", "widget", "acronym"})
LANGUAGE_PREFIX = re.compile(r"^[A-Za-z]{2,3}(?:-[A-Za-z]{2,4})?/(?=text/)")
SPACE_OR_WORD = re.compile(r"\s+|\S+")


class MarkedPair(typing.NamedTuple):
    """One paragraph of a page in both languages, with inline tags, and its plain text (as the corpus has it)."""

    page: str
    paragraph_id: str
    source: str
    target: str
    source_plain: str
    target_plain: str


def tag_of(element):
    """`(opening text, name)` of the tag `element` maps to, or None for an element kept as plain text."""
    classes = set(element.get("class", "").split())
    if element.tag == "span" and "emph" in classes:
        return "<emph>", "emph"
    if element.tag == "span" and classes & ITEM_CLASSES:
        return f'<item type="{sorted(classes & ITEM_CLASSES)[0]}">', "item"
    if element.tag == "span" and "avis" in classes:
        return "<ahelp>", "ahelp"
    if element.tag == "a" and element.get("href"):
        href = LANGUAGE_PREFIX.sub("", element.get("href"))
        return f'<link href="{html.escape(href, quote=True)}">', "link"
    return None


def marked_text(element) -> str:
    """The text of a paragraph element with its inline tags (see the module docstring)."""
    events = []
    _collect(element, events, help_html.element_parts)
    return _serialize(events)


def _collect(element, events, parts):
    for part in parts(element):
        if isinstance(part, str):
            events.append(("text", part))
        else:
            _collect_child(part, events)


def _collect_child(child, events):
    if not isinstance(child.tag, str) or child.tag in help_html.SKIPPED_TAGS:
        return
    if child.tag == "br":
        events += [("empty", "<br/>"), ("text", " ")]
    elif child.tag == "img" and child.get("src"):
        events.append(("empty", f'<image src="{html.escape(child.get("src"), quote=True)}"/>'))
    elif "switchinline" in child.get("class", "").split():
        _collect(child, events, help_html.switch_parts)
    else:
        _collect_tagged(child, events)


def _collect_tagged(child, events):
    """A child's content inside its tag, if it maps to one and holds some text."""
    tag = tag_of(child)
    start = len(events)
    events.append(("open", tag[0] if tag else None))
    _collect(child, events, help_html.element_parts)
    if tag is None or not any(kind == "text" and value.strip() for kind, value in events[start:]):
        del events[start]
    else:
        events.append(("close", f"</{tag[1]}>"))


def _serialize(events) -> str:
    """The marked text: whitespace collapsed to single spaces, kept out of the tags' edges; text escaped.

    An opening tag waits for what follows it, so that a space after it goes before it.
    """
    out, opens, pending, seen_text = [], [], False, False
    for kind, value in events:
        if kind == "open":
            opens.append(value)
            continue
        if kind == "text":
            for token in SPACE_OR_WORD.findall(unicodedata.normalize("NFC", value)):
                if token.isspace():
                    pending = pending or seen_text
                    continue
                out.append((" " if pending else "") + "".join(opens) + html.escape(token, quote=False))
                opens, pending, seen_text = [], False, True
        elif opens:
            out.append((" " if pending else "") + "".join(opens) + value)
            opens, pending = [], False
        else:
            out.append(value)
    return "".join(out)


def page_marked_paragraphs(path) -> dict:
    """`help_html.page_paragraphs` of a page with the inline tags kept."""
    return help_html.page_paragraphs(path, text_of=marked_text)


def marked_pairs(source_root, target_root, pages) -> list:
    """`MarkedPair`s of `pages` (paths relative to the help roots) whose English holds a tag and differs from
    the translation; paragraph ids paired within each page as `data.libreoffice.extract_pairs` pairs them
    (pages missing in the translation are skipped)."""
    roots = [help_html.find_help_root(root) for root in (source_root, target_root)]
    pairs = []
    for page in (page for page in pages if (roots[1] / page).is_file()):
        source, target = (page_marked_paragraphs(root / page) for root in roots)
        plain = [help_html.page_paragraphs(root / page) for root in roots]
        for key, text in source.items():
            if "<" in text and target.get(key) and target[key] != text:
                pairs.append(MarkedPair(page, key[0], text, target[key], plain[0][key], plain[1][key]))
    return pairs


def marked_split_pairs(source_root, target_root, split="test") -> list:
    """The `MarkedPair`s of one split of the default corpus (`data.libreoffice`: the same pages, pairs and
    drops), i.e. the pairs of `split` whose English holds inline markup."""
    pairs = libreoffice.extract_pairs(source_root, target_root)
    chosen = libreoffice.split_by_page(pairs)[split]
    kept = {(pair.page, pair.paragraph_id, pair.source, pair.target) for pair in chosen}
    marked = marked_pairs(source_root, target_root, sorted({pair.page for pair in chosen}))
    return [pair for pair in marked if (pair.page, pair.paragraph_id, pair.source_plain, pair.target_plain) in kept]
