"""Numbered lines read through Beam's file systems, and the checks that turn a bad one into a dead-letter record.

A line is keyed by `(file index, line number)` (numbered from 1, as editors and `sed -n` number them), so the
output can be put back in the input's order. A bad line never stops the corpus: it becomes a record
`{"file", "line", "reason"}` of the dead-letter file, and its place in the output is left empty.
"""

import json

MAX_LINE_CHARACTERS = 10_000  # longer lines are not sentences (a file's binary part, a missing newline)
BOM = "\ufeff"


def numbered_lines(path):
    """`(number, raw bytes)` of each line of `path` (any file system Beam has; compressed by its extension), the
    line ending removed."""
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as handle:
        for number, raw in enumerate(iter(handle.readline, b""), start=1):
            yield number, raw.rstrip(b"\n").rstrip(b"\r")


def decoded_line(raw, number):
    """`(text, None)` of a good line, `(None, reason)` of a bad one."""
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as error:
        return None, f"invalid UTF-8 (byte {raw[error.start]:#04x} at column {error.start + 1})"
    if number == 1 and text.startswith(BOM):
        text = text[len(BOM):]
    if "\x00" in text:
        return None, f"a NUL character at column {text.index(chr(0)) + 1}"
    if len(text) > MAX_LINE_CHARACTERS:
        return None, f"{len(text)} characters, more than the {MAX_LINE_CHARACTERS} a line may hold"
    return text, None


def checked_sentence(raw, number):
    """A line to translate: `(text, None)` or `(None, reason)`."""
    return decoded_line(raw, number)


def checked_pair(raw, number):
    """A SOURCE<TAB>TARGET line to score: `((source, target), None)` or `(None, reason)`."""
    text, reason = decoded_line(raw, number)
    if reason:
        return None, reason
    fields = text.split("\t")
    if len(fields) != 2:
        return None, f"{len(fields)} tab-separated fields, not two (SOURCE<TAB>TARGET)"
    if not fields[0].strip() or not fields[1].strip():
        return None, f"a pair with its {'source' if not fields[0].strip() else 'target'} missing"
    return (fields[0], fields[1]), None


CHECKS = {"sentence": checked_sentence, "pair": checked_pair}


def dead_letter(path, number, reason):
    """One record of the dead-letter file."""
    return {"file": path, "line": number, "reason": reason}


def dead_letter_text(records):
    """The dead-letter file: one JSON object a line, by file and line number."""
    ordered = sorted(records, key=lambda record: (record["file"], record["line"]))
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in ordered)
