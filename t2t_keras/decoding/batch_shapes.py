"""Batch shapes for compiled searches: few distinct shapes, so XLA compiles few programs.

Widths are rounded up to a multiple of `LENGTH_MULTIPLE` and row counts to a
power of two; the extra rows repeat a real one and are dropped afterwards. The plans (`plan_batches`,
`pad_batch`) are NumPy's, for every artifact, the CTranslate2 one without TensorFlow; the graph's helpers import
TensorFlow when called.
"""

import numpy as np

from t2t_keras.special_ids import PAD_ID

LENGTH_MULTIPLE = 8  # source widths are rounded up to a multiple of this


def power_of_two_rows(rows):
    """The smallest power of two >= `rows` (>= 1)."""
    return 1 << (max(rows, 1) - 1).bit_length()


def pad_rows_to_power_of_two(items):
    """`items` (a non-empty list) extended to a power-of-two length by repeating its first element."""
    return items + [items[0]] * (power_of_two_rows(len(items)) - len(items))


def power_of_two_rows_tensor(rows):
    """`power_of_two_rows` in the graph: the smallest power of two >= `rows` (an int32 scalar >= 1)."""
    import tensorflow as tf

    below = rows - 1
    for shift in (1, 2, 4, 8, 16):  # every bit below the highest set: below + 1 is the power of two
        below = tf.bitwise.bitwise_or(below, tf.bitwise.right_shift(below, shift))
    return below + 1


def in_power_of_two_rows(search):
    """`search(source, *args)` run on `source`'s rows padded to a power of two (repeating its first row, inside
    the graph), its outputs (the batch on axis 0) cut back to the real rows: a compiled search sees few shapes.
    `source` needs at least one row."""
    import tensorflow as tf

    def run(source, *args):
        rows = tf.shape(source)[0]
        extra = tf.repeat(source[:1], power_of_two_rows_tensor(rows) - rows, axis=0)
        outputs = search(tf.concat([source, extra], axis=0), *args)
        return tf.nest.map_structure(lambda output: output[:rows], outputs)

    return run


def plan_batches(lengths, batch_tokens, length_multiple=LENGTH_MULTIPLE):
    """Index arrays of batches, longest sentences first; zero-length entries are skipped.

    A batch's width is its longest sentence rounded up to `length_multiple`,
    and rows x width never exceeds `batch_tokens` (a sentence longer than the
    budget gets a batch of its own).
    """
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    order = order[lengths[order] > 0]
    batches, start = [], 0
    while start < len(order):
        width = _round_up(lengths[order[start]], length_multiple)
        rows = max(1, batch_tokens // width)
        batches.append(order[start:start + rows])
        start += rows
    return batches


def pad_batch(rows, length_multiple=LENGTH_MULTIPLE, batch_tokens=None, pad=PAD_ID):
    """int32 `(num_rows, width)` array of `rows`, padded with `pad` (the model's padding id).

    The width is the longest row rounded up to `length_multiple`. With
    `batch_tokens`, the number of rows is rounded up to a power of two as far
    as the budget allows, and the extra rows repeat the first one.
    """
    width = _round_up(max(len(row) for row in rows), length_multiple)
    num_rows = len(rows)
    if batch_tokens is not None:
        num_rows = max(num_rows, min(power_of_two_rows(num_rows), batch_tokens // width))
    batch = np.full((num_rows, width), pad, np.int32)
    for i in range(num_rows):
        row = rows[i] if i < len(rows) else rows[0]
        batch[i, :len(row)] = row
    return batch


def _round_up(value, multiple):
    return -(-int(value) // multiple) * multiple
