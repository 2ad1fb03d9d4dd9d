"""A request's constraints as a search takes them: each line's target terms as piece ids, checked, padded.

A line's terms are tokenized each alone with the run's tokenizer (the form a word has after a space,
`data.terminology`). A line gets an error of its own, and an empty text, when its terms cannot be searched
for: they hold a character the tokenizer does not know (UNK would detokenize to another text), they need more
pieces than the line's output limit allows (source length + max_extra_length, at most the model's length), or
the line is empty. The other lines of the batch translate. The batch holds the lines' constraints as int32
`(rows, C, L)`, C a power of two and L a multiple of `CONSTRAINT_LENGTH_MULTIPLE`, so XLA compiles few shapes.
"""

import numpy as np

from t2t_keras.decoding.batch_shapes import power_of_two_rows
from t2t_keras.decoding.constrained import constraint_room
from t2t_keras.decoding.layout import target_pieces
from t2t_keras.special_ids import PAD_ID, UNK_ID

CONSTRAINT_LENGTH_MULTIPLE = 4  # constraint widths are rounded up to a multiple of this
UNKNOWN = ("a target term holds characters the vocabulary does not know (they would come out as ⁇): write it with "
           "characters of the training corpus")
EMPTY = "the sentence is empty: an empty input holds no terms"
UNSATISFIED = "no translation holding every term was found"
# What an export's `translate_constrained` signature reports with `satisfied` false (it tells no reason apart).
UNSATISFIED_IN_EXPORT = ("no translation holding every term was found: the terms need more pieces than the output "
                         "limit (source length + max_extra_length) allows, hold characters the vocabulary does not "
                         "know, or the input is empty; raise max_extra_length or give fewer terms")


def term_ids(tokenizer, constraints, unk=UNK_ID):
    """Per line of `constraints` (tuples of target terms), the target pieces of each term, and per line None or the
    error that keeps it from being searched (an unknown character: the model's `unk` id)."""
    terms = sorted({term for row in constraints for term in row})
    pieces = dict(zip(terms, target_pieces(tokenizer, terms).to_list())) if terms else {}
    rows = [[[int(i) for i in pieces[term]] for term in row] for row in constraints]
    errors = [UNKNOWN if any(unk in ids or not ids for ids in row) else None for row in rows]
    return rows, errors


def room_error(row, source_length, max_extra_length, model_max_length):
    """None if the constraints `row` (id lists) fit in the output limit of a source of `source_length` ids (EOS
    included), else why not."""
    lengths = [len(ids) for ids in row]
    fits, limit = constraint_room(lengths, source_length, max_extra_length, model_max_length)
    if fits:
        return None
    return (f"its terms need {sum(lengths)} target pieces but its translation may hold at most {limit} (source "
            f"length {source_length} + max_extra_length {max_extra_length}, at most the model's "
            f"{model_max_length}): raise --max-extra-length or give this sentence fewer terms")


def constraint_batch(rows, num_rows, pad=PAD_ID):
    """int32 `(num_rows, C, L)` of the sentences' constraints `rows`, padded with `pad` (the model's padding id);
    rows past `len(rows)` repeat the first (as `batch_shapes.pad_batch` does). C: a power of two, L: a multiple of
    `CONSTRAINT_LENGTH_MULTIPLE`."""
    count = power_of_two_rows(max([len(row) for row in rows] + [1]))
    longest = max([len(ids) for row in rows for ids in row] + [1])
    width = -(-longest // CONSTRAINT_LENGTH_MULTIPLE) * CONSTRAINT_LENGTH_MULTIPLE
    batch = np.full((num_rows, count, width), pad, np.int32)
    for i in range(num_rows):
        for j, ids in enumerate(rows[i] if i < len(rows) else rows[0]):
            batch[i, j, :len(ids)] = ids
    return batch
