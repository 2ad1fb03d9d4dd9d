"""A terminology: source terms, and the target term a translation of a sentence holding one must contain.

The file (`translate --terminology FILE`) is UTF-8 text, one `source term<TAB>target term` per line; blank
lines are skipped, a line holding the same pair as an earlier one is allowed (once is enough), a source term
given two different targets is an error.

Matching: a term applies to a sentence whose text, as given (before tokenization), contains the source term as
whole words: case-sensitive, with no letter, digit or underscore right before or after it. Every term found
applies (overlapping ones too: "New York" and "York" both apply to "New York"); a target term required twice in
a sentence counts once.

Target terms become the constraints of the search (`decoding.constrained`): their pieces under the run's
tokenizer, tokenized alone. A SentencePiece tokenizer adds its word-initial marker to a text's first word, so a
term comes out in the form it has after a space, mid-sentence (`▁Haus`), which is also how a sentence's first
word is tokenized; a WordPiece tokenizer's first pieces carry no `##` either. So the detokenized translation
contains the target term as written. Its right-hand word boundary is not enforced: the model may follow the
term with a piece that carries no word marker, which glues onto it.
"""

import re
from typing import NamedTuple

from t2t_keras.data.text_files import decode_text, split_tsv_line
from t2t_keras.errors import DataError
from t2t_keras.special_ids import UNK_ID

FORMAT = "one 'source term<TAB>target term' per line, UTF-8"


class Term(NamedTuple):
    source: str
    target: str
    line: int  # where the file first gives it


class Terminology:
    """The terms of a terminology file, and which of them apply to a sentence.

    Args:
        terms: `Term`s with distinct source terms.
        origin: where they come from (the file), for messages.
    """

    def __init__(self, terms, origin="<terms>"):
        self.terms = tuple(terms)
        self.origin = str(origin)
        self._patterns = [re.compile(r"(?<!\w)" + re.escape(term.source) + r"(?!\w)") for term in self.terms]

    @classmethod
    def load(cls, path):
        """The terminology in file `path`.

        Raises:
            DataError: the file is missing or unreadable, not UTF-8, empty, or a line has not exactly one tab,
                has an empty term, or gives a source term another target than an earlier line (line named).
        """
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise DataError(f"The terminology file {path} does not exist: fix the path ({FORMAT}).") from None
        except OSError as err:
            raise DataError(f"The terminology file {path} cannot be read ({err.strerror or err}): give a readable "
                            f"file, {FORMAT}.") from None
        terms = {}
        for number, line in enumerate(decode_text(data, path), start=1):
            if line.strip():
                _add_term(terms, path, number, *split_tsv_line(path, number, line))
        if not terms:
            raise DataError(f"The terminology file {path} holds no terms: write {FORMAT}.")
        return cls(terms.values(), path)

    def targets(self, sentence):
        """The target terms that apply to `sentence`, in file order, each once."""
        found = [term.target for term, pattern in zip(self.terms, self._patterns) if pattern.search(sentence)]
        return list(dict.fromkeys(found))

    def target_ids(self, tokenizer):
        """{target term: its pieces (a list of ids)} under `tokenizer` (`tokenize(list of str)` -> ragged ids).

        Raises:
            DataError: a target term has a character the tokenizer does not know (it would be UNK, which
                detokenizes to another text), or no pieces at all (line named).
        """
        targets = list(dict.fromkeys(term.target for term in self.terms))
        lines = {}
        for term in self.terms:
            lines.setdefault(term.target, term.line)
        pieces = tokenizer.tokenize(targets).to_list()
        for target, ids in zip(targets, pieces):
            where = f"{self.origin}:{lines[target]}"
            if not ids:
                raise DataError(f"{where}: the target term {target!r} has no pieces under the run's tokenizer: "
                                "give a target term with text in it.")
            if UNK_ID in ids:
                raise DataError(f"{where}: the target term {target!r} holds characters the run's tokenizer does not "
                                "know (they would come out as ⁇): write the term with characters of the training "
                                "corpus, or drop that line.")
        return {target: [int(i) for i in ids] for target, ids in zip(targets, pieces)}

    def constraints(self, sentences, tokenizer):
        """Per sentence of `sentences`, the pieces of each target term that applies to it (lists of id lists)."""
        ids = self.target_ids(tokenizer)
        return [[ids[target] for target in self.targets(sentence)] for sentence in sentences]


def _add_term(terms, path, number, source, target):
    """Adds line `number`'s term to `terms` ({source: Term}), refusing empty terms and conflicting duplicates."""
    source, target = source.strip(), target.strip()
    for side, text in (("source", source), ("target", target)):
        if not text:
            raise DataError(f"{path}:{number}: the {side} term is empty: write {FORMAT}, both terms non-empty, "
                            "or remove the line.")
    earlier = terms.get(source)
    if earlier is not None and earlier.target != target:
        raise DataError(f"{path}:{number}: the source term {source!r} has the target {target!r} here but "
                        f"{earlier.target!r} on line {earlier.line}: keep one of the two lines.")
    terms.setdefault(source, Term(source, target, number))
