"""Plain-text paragraphs from the compiled LibreOffice help pages.

The Debian/Ubuntu ``libreoffice-help-<lang>`` packages ship the help as
HTML compiled from the ``.xhp`` sources, one page per source file, under
``usr/share/libreoffice/help/<lang>/text/...``. Every translatable paragraph
keeps the id of its source paragraph (``par_id…``, ``hd_id…``) in every
language, which is what makes the pages alignable.

Inline alternatives (``<span class="switchinline">``) hold one variant per
platform or application, e.g. *LibreOffice - Preferences* for macOS next to
*Tools - Options* for the others; only one of them is shown to a reader, so
only the default one (or the first, when there is no default) is kept.
"""

import pathlib
import re
import unicodedata

import lxml.html

PARAGRAPH_ID = re.compile(r"^(?:par|hd)_id")
SKIPPED_CLASSES = frozenset({"code", "codeintable", "smathcode"})
SKIPPED_TAGS = frozenset({"script", "style"})
_PARSER = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)
HELP_DIR_PATTERNS = ("usr/share/libreoffice/help/*", "usr/lib/libreoffice/help/*")


def find_help_root(root) -> pathlib.Path:
    """Return the language directory (the one holding ``text/``) under ``root``.

    ``root`` may already be that directory, or a tree unpacked from a
    ``.deb`` (``usr/share/libreoffice/help/<lang>/``). Returns ``None`` when
    no help pages are found.
    """
    root = pathlib.Path(root)
    if (root / "text").is_dir():
        return root
    for pattern in HELP_DIR_PATTERNS:
        for candidate in sorted(root.glob(pattern)):
            if (candidate / "text").is_dir():
                return candidate
    return None


def list_pages(help_root) -> list[str]:
    """Relative POSIX paths of all help pages (``text/**/*.html``), sorted."""
    help_root = pathlib.Path(help_root)
    pages = (help_root / "text").rglob("*.html")
    return sorted(page.relative_to(help_root).as_posix() for page in pages)


def normalize(text: str) -> str:
    """NFC-normalise and collapse every run of whitespace (incl. NBSP) to one space."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def page_paragraphs(path, text_of=None) -> dict[tuple[str, int], str]:
    """Map ``(paragraph id, occurrence)`` to the paragraph's plain text.

    The occurrence number tells apart the copies of one paragraph that a page
    embeds more than once (e.g. once per platform). Code samples are skipped:
    their translations rename identifiers, which is not translation.
    ``text_of`` (default :func:`element_text`) makes the text of a paragraph
    element; ``bench/help_markup.py`` passes one that keeps the inline tags.
    """
    text_of = element_text if text_of is None else text_of
    document = lxml.html.document_fromstring(
        pathlib.Path(path).read_bytes(), parser=_PARSER
    )
    paragraphs, seen = {}, {}
    for element in document.iter():
        element_id = element.get("id") if isinstance(element.tag, str) else None
        if not element_id or not PARAGRAPH_ID.match(element_id):
            continue
        occurrence = seen.get(element_id, 0)
        seen[element_id] = occurrence + 1
        if not SKIPPED_CLASSES.intersection(element.get("class", "").split()):
            paragraphs[(element_id, occurrence)] = text_of(element)
    return paragraphs


def element_text(element) -> str:
    """The visible plain text of ``element``, inline markup stripped, whitespace normalised."""
    parts = []
    _collect_text(element, parts)
    return normalize("".join(parts))


def element_parts(element):
    """The text of ``element`` and its children, in document order: strings (its text, each child's tail) and
    child elements (not its own tail)."""
    if element.text:
        yield element.text
    for child in element:
        yield child
        if child.tail:
            yield child.tail


def switch_parts(switch):
    """Like :func:`element_parts` for a ``switchinline``, with only the alternative a default reader sees.

    Alternatives are the hidden children; the one with id ``default…`` is
    chosen, else the first (:func:`switch_choice`). Any other content (text
    left inside the switch by a missing closing tag in a translation) is kept.
    """
    chosen = switch_choice(switch)
    for part in element_parts(switch):
        if isinstance(part, str) or part is chosen or part.get("hidden") is None:
            yield part


def _collect_text(element, parts: list, elements=element_parts) -> None:
    """Append the text of ``element`` and its descendants (not its tail) to ``parts``."""
    for part in elements(element):
        if isinstance(part, str):
            parts.append(part)
        else:
            _collect_child(part, parts)


def _collect_child(child, parts: list) -> None:
    """Append the text of one child element: a line break is a space, scripts are skipped."""
    if not isinstance(child.tag, str) or child.tag in SKIPPED_TAGS:
        return
    if child.tag == "br":
        parts.append(" ")
    elif "switchinline" in child.get("class", "").split():
        _collect_text(child, parts, switch_parts)
    else:
        _collect_text(child, parts)


def switch_choice(switch):
    """The alternative of a ``switchinline`` a default reader sees: the hidden child with id ``default…``, else
    the first hidden child (None when it has none)."""
    cases = [child for child in switch if child.get("hidden") is not None]
    defaults = [case for case in cases if case.get("id", "").startswith("default")]
    return (defaults or cases or [None])[0]
