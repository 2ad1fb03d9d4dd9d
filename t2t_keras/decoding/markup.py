"""Sentences with inline tags: parsed into plain text and a tree of tags over its characters, and written back.

The markup is a small XML subset, the one the LibreOffice help's inline markup
takes in `data.help_html.marked_paragraphs`: paired tags `<name attr="...">…</name>`
and self-closing tags `<name/>`, properly nested; `&lt;`, `&gt;`, `&amp;`,
`&quot;` and other character references in the text. A bare `<` that opens no
tag is an error (write `&lt;`). Tags are copied to the output exactly as
written; the text between them is what gets translated.

A tag covers the whitespace words its text overlaps (a tag inside a word
covers the whole word); a self-closing tag, or a paired tag around no text,
sits after the word before it (`anchor_word`, -1 at the start).
"""

import dataclasses
import html
import re

from t2t_keras.errors import T2TError

NAME = r"[A-Za-z_][\w.:-]*"
TAG = re.compile(rf'<(/?)({NAME})((?:\s+{NAME}\s*=\s*(?:"[^"<]*"|\'[^\'<]*\'))*)\s*(/?)>')
WORD = re.compile(r"\S+")
EXCERPT = 80  # characters of a sentence quoted in an error


class MarkupError(T2TError):
    """A sentence's markup is not well formed (a tag never closed, closed without opening, or crossing)."""


@dataclasses.dataclass
class Tag:
    """One tag of a sentence: its text as written, the characters of the plain text it covers, its children."""

    open_text: str  # '<emph>', '<link href="x">', '<br/>'
    name: str
    start: int  # first character of its content in the plain text
    end: int = -1  # one past its last character; == start for a self-closing tag
    self_closing: bool = False
    order: int = 0  # position of the opening among all tags of the sentence
    children: list = dataclasses.field(default_factory=list)

    @property
    def close_text(self):
        return "" if self.self_closing else f"</{self.name}>"


@dataclasses.dataclass
class MarkedText:
    """A parsed sentence: its plain text, its top-level tags and its words' character spans."""

    plain: str
    tags: list
    words: list  # (start, end) character span of each whitespace word of `plain`

    def tag_list(self):
        """Every tag, in the order of its opening."""
        found, stack = [], list(reversed(self.tags))
        while stack:
            tag = stack.pop()
            found.append(tag)
            stack.extend(reversed(tag.children))
        return found

    def covered_words(self, tag):
        """Indices of the words whose characters overlap the tag's content."""
        return [i for i, (start, end) in enumerate(self.words) if start < tag.end and end > tag.start]

    def anchor_word(self, position):
        """The last word that starts before character `position` (-1: none)."""
        return sum(start < position for start, _ in self.words) - 1


def _error(where, text, problem):
    excerpt = text if len(text) <= EXCERPT else text[:EXCERPT - 3] + "..."
    return MarkupError(f"{where} {excerpt!r}: {problem}")


def parse_markup(text, where="the sentence"):
    """The `MarkedText` of `text`; a `MarkupError` naming the sentence (`where`, e.g. "line 3") and the tag."""
    plain, roots, stack, position, order = [], [], [], 0, 0
    for match in TAG.finditer(text):
        plain.append(_text_chunk(text, position, match.start(), where))
        position, length = match.end(), sum(map(len, plain))
        closing, name, _, self_closing = match.groups()
        if closing:
            _close(stack, name, match.group(0), length, text, where)
            continue
        tag = Tag(match.group(0), name, length, length if self_closing else -1, bool(self_closing), order)
        order += 1
        (stack[-1].children if stack else roots).append(tag)
        if not self_closing:
            stack.append(tag)
    plain.append(_text_chunk(text, position, len(text), where))
    if stack:
        raise _error(where, text, f"the tag {stack[-1].open_text} is never closed: add </{stack[-1].name}> where "
                                  "its text ends, or remove the tag.")
    plain = "".join(plain)
    return MarkedText(plain, roots, [match.span() for match in WORD.finditer(plain)])


def _text_chunk(text, start, end, where):
    """The text between two tags, character references resolved; a `<` that opens no tag is an error."""
    chunk = text[start:end]
    if "<" in chunk:
        at = start + chunk.index("<")
        raise _error(where, text, f"the '<' at character {at} opens no tag (tags look like <name>, </name>, "
                                  "<name/>): write &lt; for a literal '<'.")
    return html.unescape(chunk)


def _close(stack, name, written, position, text, where):
    if not stack:
        raise _error(where, text, f"{written} closes no open tag: remove it, or add <{name}> where its text "
                                  "starts.")
    if stack[-1].name != name:
        if any(tag.name == name for tag in stack):
            raise _error(where, text, f"the tags {stack[-1].open_text} and </{name}> cross: close "
                                      f"</{stack[-1].name}> before </{name}> so that the tags nest.")
        raise _error(where, text, f"{written} closes no open tag (the open one is {stack[-1].open_text}): fix the "
                                  "tag's name, or remove it.")
    stack.pop().end = position


def strip_markup(text, where="the sentence"):
    """The plain text of a marked-up sentence."""
    return parse_markup(text, where).plain


def join_pieces(items):
    """The marked-up text of `("word", text)`, `("open", tag)`, `("close", tag)` and `("empty", tag)` items.

    Words are escaped and separated by one space, which goes before the first tag between them that is still
    open at the next word (else just before that word): closing and self-closing tags stick to the word before
    them, opening tags to the word after them (`"Choose <emph>File - New</emph>, then"`). Without its tags the
    text is the words joined by single spaces.
    """
    out, between, seen_word = [], [], False
    for kind, value in items:
        if kind != "word":
            between.append((kind, value))
            continue
        closed = {id(tag) for what, tag in between if what == "close"}
        split = next((k for k, (what, tag) in enumerate(between) if what == "open" and id(tag) not in closed),
                     len(between))
        space = " " if seen_word else ""
        out += [_tag_text(*item) for item in between[:split]] + [space]
        out += [_tag_text(*item) for item in between[split:]] + [html.escape(value, quote=False)]
        between, seen_word = [], True
    return "".join(out + [_tag_text(*item) for item in between])


def _tag_text(kind, tag):
    return tag.close_text if kind == "close" else tag.open_text
