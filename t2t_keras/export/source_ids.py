"""An in-graph export's source rows: piece ids in, the model's input out, with its own ids around them.

    source, truncated, empty = prepare_source(piece_ids, model.max_length, model.vocab_size, model.special_ids)

The rows hold piece ids right-padded with the model's padding id; an end id in a row ends it (what follows is
ignored), and ids outside the vocabulary become its unknown id. Each row is cut so that it fits in `max_length`
ids with the layout's ids around it (`decoding.layout`: none before and the end id after for a model of ours; an
imported checkpoint's own, NLLB's source language before), and padded to a width that is a multiple of
`LENGTH_MULTIPLE` (within `max_length`), as `decoding.generator.Generator` pads, so that a compiled search sees
few shapes. Core TensorFlow ops only (an ids-only export loads in stock TF Serving).
"""

import tensorflow as tf

from t2t_keras.decoding.batch_shapes import LENGTH_MULTIPLE
from t2t_keras.special_ids import SpecialIds

DEFAULT_IDS = SpecialIds()


def prepare_source(source_ids, max_length, vocab_size, ids=DEFAULT_IDS, prefix=(), suffix=None):
    """Model input from right-padded piece ids: cut to fit, between `prefix` and `suffix`.

    Args:
        source_ids: int32 `(batch, width)` piece ids, padded with `ids.pad`.
        max_length, vocab_size: the model's.
        ids: the model's `SpecialIds`.
        prefix, suffix: int32 ids (Python sequences or 1-D tensors of a static length) put before and after each
            row's pieces; `suffix` None: the end id alone.

    Returns:
        `source` int32 `(batch, width)`, each row prefix, pieces, suffix, then padding; `truncated` bool `(batch,)`
        for rows that lost pieces, and `empty` bool `(batch,)` for rows without pieces.
    """
    prefix = tf.reshape(tf.cast(prefix, tf.int32), [-1])
    suffix = tf.reshape(tf.cast([ids.eos] if suffix is None else suffix, tf.int32), [-1])
    before, after = prefix.shape[0], suffix.shape[0]
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    after_eos = tf.math.cumsum(tf.cast(tf.equal(source_ids, ids.eos), tf.int32), axis=1) > 0
    keep = tf.logical_not(after_eos) & tf.not_equal(source_ids, ids.pad)
    valid = (source_ids >= 0) & (source_ids < vocab_size)
    pieces = tf.where(keep, tf.where(valid, source_ids, ids.unk), ids.pad)
    lengths = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)  # (batch,)
    kept = tf.minimum(lengths, max_length - before - after)
    longest = tf.reduce_max(tf.concat([kept, [0]], axis=0)) + before + after  # 1 row of specials for an empty batch
    width = tf.minimum(-(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE, max_length)
    if before:
        pieces = tf.concat([tf.tile(prefix[None], [tf.shape(pieces)[0], 1]), pieces], axis=1)
    pieces = pieces[:, :width]
    pieces = tf.pad(pieces, [[0, 0], [0, width - tf.shape(pieces)[1]]], constant_values=ids.pad)  # (batch, width)
    columns = tf.range(width)[None, :]
    end = kept[:, None] + before  # the column of the suffix's first id
    source = pieces
    for index in range(after):
        source = tf.where(tf.equal(columns, end + index), suffix[index], source)
    source = tf.where(columns >= end + after, ids.pad, source)
    return source, lengths > kept, tf.equal(lengths, 0)
