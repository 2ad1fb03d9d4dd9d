"""SentencePiece BPE encoding as plain tensor ops (gathers, comparisons, one `while`), for LiteRT's builtin ops.

TF-Text's `FastSentencepieceTokenizer`, whose ops LiteRT runs, segments
text by the pieces' scores (the unigram algorithm). For a unigram model
that is SentencePiece's own segmentation; for a BPE model it is not: BPE
applies merges in order, and Viterbi over the merge ranks picks other
pieces ("tree" -> "▁t" "ree" instead of "▁tree"), which the model never saw
in training. So a BPE model is encoded in two steps:

1. `character_model` derives a SentencePiece model holding only the
   single-character pieces (and the special ones), with the original
   normalizer. `FastSentencepieceTokenizer` on it normalizes the text and
   splits it into characters, exactly as SentencePiece's BPE encoder
   starts; unknown characters become UNK, a run of them one UNK, as in
   SentencePiece. `to_original` maps its ids back to the model's.
2. `apply_merges` then repeats SentencePiece's step until no pair merges:
   of all adjacent pairs whose concatenation is a piece, merge the one whose
   piece scores highest, the leftmost on ties (`bpe_model.cc`'s agenda
   order). Each row merges one pair per iteration. A pair is looked up in a
   sorted table of keys `left * vocab + right` (`merge_table`: every split of
   every piece into two pieces) by a binary search of fixed depth.

Both are equal to the `sentencepiece` library's encoding (`tests/test_litert.py`).
"""

import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from t2t_keras.special_ids import PAD_ID

NORMAL = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
NO_POSITION = np.int32(2**30)  # larger than any row


class MergeTable(NamedTuple):
    """Every pair of pieces that concatenates to a piece, sorted by key."""

    keys: np.ndarray  # int64 (M,): left id * vocab_size + right id, ascending
    merged: np.ndarray  # int32 (M,): the id of the concatenated piece
    scores: np.ndarray  # float32 (M,): its score (higher merges first)
    vocab_size: int


def parse_model(model_bytes):
    """The `ModelProto` of a serialized SentencePiece model."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(bytes(model_bytes))
    return proto


def merge_table(proto):
    """The `MergeTable` of a SentencePiece BPE `ModelProto` (only normal pieces take part in merges)."""
    index = {piece.piece: i for i, piece in enumerate(proto.pieces) if piece.type == NORMAL}
    vocab_size = len(proto.pieces)
    rows = []
    for i, piece in enumerate(proto.pieces):
        if piece.type != NORMAL:
            continue
        text = piece.piece
        for cut in range(1, len(text)):
            left, right = index.get(text[:cut]), index.get(text[cut:])
            if left is not None and right is not None:
                rows.append((left * vocab_size + right, i, piece.score))
    rows.sort()
    keys = np.array([r[0] for r in rows], np.int64)
    merged = np.array([r[1] for r in rows], np.int32)
    scores = np.array([r[2] for r in rows], np.float32)
    return MergeTable(keys, merged, scores, vocab_size)


def character_model(proto):
    """`(model_bytes, to_original)`: a unigram model of the single-character and special pieces of `proto`.

    `to_original` int32 maps its ids to the ids of `proto`.
    """
    characters = sentencepiece_model_pb2.ModelProto()
    characters.CopyFrom(proto)
    del characters.pieces[:]
    to_original = []
    for i, piece in enumerate(proto.pieces):
        if piece.type != NORMAL or len(piece.piece) == 1:
            characters.pieces.append(piece)
            to_original.append(i)
    characters.trainer_spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    return characters.SerializeToString(), np.array(to_original, np.int32)


def apply_merges(symbols, table):
    """BPE pieces of `symbols` int32 `(batch, width)` character ids (0-padded on the right), 0-padded.

    The result has the same shape: each merge shifts the rest of its row left.
    """
    symbols = tf.convert_to_tensor(symbols, tf.int32)
    if len(table.keys) == 0:
        return symbols
    keys = tf.constant(table.keys)
    width = tf.shape(symbols)[1]
    # One more PAD column: every row then has a pair, also a row of width 0 or 1.
    symbols = tf.concat([symbols, tf.fill([tf.shape(symbols)[0], 1], PAD_ID)], axis=1)
    symbols, _ = tf.while_loop(lambda symbols, merged: merged,
                               lambda symbols, merged: _merge_once(symbols, keys, table),
                               (symbols, tf.constant(True)), maximum_iterations=width)
    return symbols[:, :width]


def _merge_once(symbols, keys, table):
    """Each row's best pair merged (`symbols` `(batch, width)`); whether any row merged."""
    pairs = tf.cast(symbols[:, :-1], tf.int64) * table.vocab_size + tf.cast(symbols[:, 1:], tf.int64)
    found, at = _lookup(pairs, keys)  # (batch, width - 1)
    scores = tf.where(found, tf.gather(tf.constant(table.scores), at), float("-inf"))
    best = tf.reduce_max(scores, axis=1, keepdims=True)
    columns = tf.range(tf.shape(pairs)[1])[None, :]
    position = tf.reduce_min(tf.where(found & tf.equal(scores, best), columns, NO_POSITION), axis=1, keepdims=True)
    merges = position < NO_POSITION  # (batch, 1)
    chosen = tf.gather(at, tf.minimum(position, tf.shape(pairs)[1] - 1), batch_dims=1)  # (batch, 1)
    piece = tf.gather(tf.constant(table.merged), chosen)
    all_columns = tf.range(tf.shape(symbols)[1])[None, :]
    shifted = tf.concat([symbols[:, 1:], tf.fill([tf.shape(symbols)[0], 1], PAD_ID)], axis=1)
    merged = tf.where(all_columns < position, symbols, tf.where(tf.equal(all_columns, position), piece, shifted))
    return tf.where(merges, merged, symbols), tf.reduce_any(merges)


def _lookup(queries, keys):
    """`(found, index)`: whether each int64 query is in the sorted `keys`, and where (binary search)."""
    size = int(keys.shape[0])
    low = tf.zeros_like(queries, tf.int32)
    high = tf.fill(tf.shape(queries), size)
    for _ in range(max(1, math.ceil(math.log2(size + 1)))):
        middle = (low + high) // 2
        right = tf.gather(keys, tf.minimum(middle, size - 1)) < queries
        low = tf.where(right, middle + 1, low)
        high = tf.where(right, high, middle)
    index = tf.minimum(low, size - 1)
    return tf.equal(tf.gather(keys, index), queries), index
