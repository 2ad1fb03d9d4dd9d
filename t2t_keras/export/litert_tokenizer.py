"""A run's SentencePiece tokenizer in ops the LiteRT interpreter runs: TF-Text's TFLite ops and builtin ops.

`data.tokenizer.Tokenizer` runs TF-Text's `SentencepieceOp`, a TensorFlow op
that a `.tflite` file could hold only as a Flex (select TF) op, which the
LiteRT interpreter from PyPI (`ai-edge-litert`) cannot run. This tokenizer
holds the same SentencePiece model in the ops TF-Text provides for TFLite,
`TFText>FastSentencepieceTokenize` and `TFText>FastSentencepieceDetokenize`
(custom ops, registered in the interpreter by
`tensorflow_text.tflite_registrar`), and does the rest with builtin ops:

* unigram models: the fast op's segmentation is SentencePiece's;
* BPE models: the fast op splits the normalized text into characters and
  `export.bpe_merges` applies the merges (the fast op alone would segment by
  scores, not by merges);
* detokenization: the fast op, on the pieces before the first EOS.

Tokenization and detokenization give exactly `Tokenizer`'s ids and text
(`tests/test_litert.py`). A model with byte fallback or user-defined symbols
is refused, and so is WordPiece (`check_litert_tokenizer`).
"""

import tensorflow as tf
import tensorflow_text as tf_text

from t2t_keras.errors import T2TError
from t2t_keras.export.bpe_merges import apply_merges, character_model, merge_table, parse_model
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID

LITERT_TOKENIZERS = ("bpe", "unigram")
USER_DEFINED = 4  # ModelProto.SentencePiece.USER_DEFINED


def check_litert_tokenizer(tokenizer):
    """Raises T2TError unless `tokenizer` is a SentencePiece model the LiteRT tokenizer reproduces exactly."""
    if tokenizer.kind not in LITERT_TOKENIZERS:
        raise T2TError(f"A LiteRT export holds a SentencePiece tokenizer (data.tokenizer bpe or unigram), but this "
                       f"model's tokenizer is {tokenizer.kind!r}: TF-Text has no TFLite op for our WordPiece "
                       "detokenization. Export it as a SavedModel (t2t-keras export --format saved_model).")
    proto = parse_model(tokenizer.model_bytes)
    if proto.trainer_spec.byte_fallback or any(piece.type == USER_DEFINED for piece in proto.pieces):
        raise T2TError("A LiteRT export reproduces plain SentencePiece models, and this one uses byte fallback or "
                       "user-defined symbols: export it as a SavedModel (t2t-keras export --format saved_model).")
    return proto


class LiteRTTokenizer(tf.Module):
    """SentencePiece tokenization in LiteRT-runnable ops, equal to `data.tokenizer.Tokenizer`'s.

    Args:
        tokenizer: the run's `Tokenizer` (bpe or unigram).

    Example:

        tokenizer = LiteRTTokenizer(Tokenizer.load("runs/x/tokenizer.model"))
        ids = tokenizer.tokenize(tf.constant(["Hello world."]))  # int32 (1, width), 0-padded
        tokenizer.detokenize(ids)                                # [b"Hello world."]
    """

    def __init__(self, tokenizer, name=None):
        super().__init__(name=name)
        proto = check_litert_tokenizer(tokenizer)
        self.kind = tokenizer.kind
        self.vocab_size = tokenizer.vocab_size
        self._pieces = tf_text.FastSentencepieceTokenizer(tokenizer.model_bytes)
        if self.kind == "bpe":
            characters, self._to_original = character_model(proto)
            self._characters = tf_text.FastSentencepieceTokenizer(characters)
            self._merges = merge_table(proto)

    def tokenize(self, strings):
        """int32 `(batch, width)` piece ids of tf.string `(batch,)`, right-padded with PAD (no BOS or EOS)."""
        if self.kind == "bpe":
            characters = self._characters.tokenize(strings)
            ids = tf.gather(tf.constant(self._to_original), characters.flat_values)
            return apply_merges(padded(ids, characters.row_splits), self._merges)
        pieces = self._pieces.tokenize(strings)
        return padded(pieces.flat_values, pieces.row_splits)

    def detokenize(self, ids):
        """tf.string `(batch,)` text of int32 `(batch, length)` ids; from the first EOS on, ids are ignored, and
        PAD and BOS are dropped (as `Tokenizer.detokenize`)."""
        ids = tf.cast(ids, tf.int32)
        after_eos = tf.math.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1) > 0
        keep = ~(after_eos | tf.equal(ids, PAD_ID) | tf.equal(ids, BOS_ID))
        lengths = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)
        row_splits = tf.concat([[0], tf.math.cumsum(lengths)], axis=0)
        pieces = tf.RaggedTensor.from_row_splits(tf.boolean_mask(ids, keep), row_splits, validate=False)
        return self._pieces.detokenize(pieces)


def padded(values, row_splits):
    """The rows of a ragged tensor (`values`, `row_splits`) as a dense int32 `(batch, width)`, PAD on the right.

    Gathers and selects only: `RaggedTensor.to_tensor` would need a TF-Text custom op in LiteRT.
    """
    row_splits = tf.cast(row_splits, tf.int32)
    starts, lengths = row_splits[:-1], row_splits[1:] - row_splits[:-1]
    width = tf.reduce_max(tf.concat([lengths, [0]], axis=0))
    columns = tf.range(width)[None, :]
    values = tf.concat([tf.cast(values, tf.int32), [PAD_ID]], axis=0)  # index len(values) is valid, also for none
    dense = tf.gather(values, tf.minimum(starts[:, None] + columns, tf.shape(values)[0] - 1))
    return tf.where(columns < lengths[:, None], dense, PAD_ID)
