"""Translating lists of strings under per-sentence constraints (terms their translations must hold).

    translator = ConstrainedTranslator(model, tokenizer, DecodingParams(beam_size=4))
    result = translator.translate(["the house"], [[[17, 42]]])   # sentence 0 must hold pieces 17 42
    result.texts, result.errors                                  # translations; None or a message per sentence

Batches are `Translator`'s (same order, padding and progress bar); each is searched by
`constrained_beam_search` with its sentences' constraints padded to `(rows, C, L)`, C a power of two and L a
multiple of `CONSTRAINT_LENGTH_MULTIPLE`, so XLA compiles few shapes. A beam of one searches with
`length_penalty="none"`, which is greedy search for the sentences without constraints, as `Translator` does.

A sentence whose constraints cannot fit in its output limit (source length + max_extra_length, at most the
model's length) gets an error message of its own and an empty text; the other sentences of its batch translate.
The searches run unsharded (`shards` 1): the constraints are rows of the batch, which `decoding.sharding` does
not split.
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.batch_shapes import power_of_two_rows
from t2t_keras.decoding.constrained import constrained_beam_search, constraint_room
from t2t_keras.decoding.parameters import DEFAULTS
from t2t_keras.decoding.sharding import compiled_search
from t2t_keras.decoding.translator import Translator
from t2t_keras.errors import T2TError
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID

CONSTRAINT_LENGTH_MULTIPLE = 4  # constraint widths are rounded up to a multiple of this


class ConstrainedTranslations(NamedTuple):
    """`texts`: one translation per sentence ("" where it failed); `errors`: None or a message per sentence."""

    texts: list
    errors: list


class ConstrainedTranslator(Translator):
    """`Translator` whose `translate` takes each sentence's constraints: lists of target ids (see module doc).

    Args: `Translator`'s; `shards` is ignored (always 1) and `shortlist` refused (it could leave out a
    constraint's pieces).
    """

    def __init__(self, model, tokenizer, params=DEFAULTS, length_penalty="gnmt", **options):
        options.pop("shards", None)
        if options.pop("shortlist", None) is not None:
            raise T2TError("A vocabulary shortlist does not apply to a search with terms: translate without it.")
        super().__init__(model, tokenizer, params, length_penalty, shards=1, **options)
        signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, None], tf.int32)]
        self._constrained_jit = self.uses_xla(1)  # its own loop, without compaction: XLA's shapes at any size
        self._constrained = compiled_search(self._decode_constrained, self._constrained_jit, 1, signature)

    def _decode_constrained(self, source, constraints):
        """Best output ids `(batch, length)` under `constraints`, and whether each holds them all."""
        params = self.params
        greedy = params.method == "greedy"
        out = constrained_beam_search(self.model, source, constraints, beam_size=params.beam_size,
                                      alpha=params.alpha, length_penalty="none" if greedy else self.length_penalty,
                                      max_extra_length=params.max_extra_length, stopping=self.stopping,
                                      growing_cache=not self._constrained_jit)
        return out["tokens"][:, 0], out["satisfied"]

    def translate(self, sentences, constraints=None):
        """`ConstrainedTranslations` of `sentences` (a list of str); `constraints`: per sentence, a list of
        constraints, each a non-empty list of target ids (None: none at all)."""
        sentences = list(sentences)
        constraints = [[] for _ in sentences] if constraints is None else [list(c) for c in constraints]
        if len(constraints) != len(sentences):
            raise T2TError(f"{len(sentences)} sentences but {len(constraints)} lists of constraints: give one list "
                           "(possibly empty) per sentence.")
        for row in constraints:
            check_constraint_ids(row, self.model.vocab_size)
        texts = [""] * len(sentences)
        errors = ["the sentence is empty: an empty input holds no terms" if row else None for row in constraints]
        for batch, source in self.batches(sentences):
            self._translate_batch(batch, source, constraints, texts, errors)
        return ConstrainedTranslations(texts, errors)

    def _translate_batch(self, batch, source, constraints, texts, errors):
        """Writes the translations and errors of the sentences `batch` (padded ids `source`) into `texts`, `errors`."""
        for i, source_row in zip(batch, source):
            errors[i] = self._room_error(constraints[i], int(np.count_nonzero(source_row)))
        rows = [[] if errors[i] else constraints[i] for i in batch]
        ids, satisfied = self._constrained(tf.constant(source), tf.constant(constraint_batch(rows, len(source))))
        for i, text, ok in zip(batch, self.tokenizer.detokenize(ids).numpy(), satisfied.numpy()):
            errors[i] = errors[i] or (None if ok else "no translation holding every term was found")
            texts[i] = "" if errors[i] else text.decode("utf-8")

    def _room_error(self, row, source_length):
        """None if the constraints `row` fit in the output limit of a source of `source_length` ids, else why not."""
        lengths = [len(ids) for ids in row]
        fits, limit = constraint_room(lengths, source_length, self.params.max_extra_length, self.model.max_length)
        if fits:
            return None
        return (f"its terms need {sum(lengths)} target pieces but its translation may hold at most {limit} (source "
                f"length {source_length} + max_extra_length {self.params.max_extra_length}, at most the model's "
                f"{self.model.max_length}): raise --max-extra-length or give this sentence fewer terms")


def check_constraint_ids(row, vocab_size):
    """Refuses a sentence's constraints that are not lists of ordinary target ids (no PAD, BOS or EOS)."""
    for ids in row:
        ids = list(ids)
        ordinary = [isinstance(i, (int, np.integer)) and i not in (PAD_ID, BOS_ID, EOS_ID) and 0 <= i < vocab_size
                    for i in ids]
        if not ids or not all(ordinary):
            raise T2TError(f"A constraint must be a non-empty list of target ids in [{EOS_ID + 1}, {vocab_size}). "
                           f"Received: {ids!r}")


def constraint_batch(rows, num_rows):
    """int32 `(num_rows, C, L)` of the sentences' constraints `rows`, 0-padded; rows past `len(rows)` repeat the
    first (as `batch_shapes.pad_batch` does). C: a power of two, L: a multiple of `CONSTRAINT_LENGTH_MULTIPLE`."""
    count = power_of_two_rows(max([len(row) for row in rows] + [1]))
    longest = max([len(ids) for row in rows for ids in row] + [1])
    width = -(-longest // CONSTRAINT_LENGTH_MULTIPLE) * CONSTRAINT_LENGTH_MULTIPLE
    batch = np.full((num_rows, count, width), PAD_ID, np.int32)
    for i in range(num_rows):
        for j, ids in enumerate(rows[i] if i < len(rows) else rows[0]):
            batch[i, j, :len(ids)] = ids
    return batch
