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

An imported OPUS-MT checkpoint's tokenizer (`data.pretrained_tokenizer`) runs the same way on its own
SentencePiece models, its pieces' SentencePiece ids mapped to the checkpoint's ids (and back) by constant
gathers; the ids around them (the end id) are `prepare_source`'s. Two of its tokenizer's rules have no LiteRT op
and are left out: a `>>xx<<` language tag at the start of a sentence is tokenized as text, and a piece outside the
SentencePiece model (such a tag) is left out of the text. A multilingual checkpoint's (NLLB, M2M-100: language
codes, NLLB's final-space piece) is refused: export a SavedModel or a CTranslate2 model.
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from t2t_keras.errors import T2TError
from t2t_keras.export.bpe_merges import apply_merges, character_model, merge_table, parse_model
from t2t_keras.special_ids import BOS_ID, PAD_ID, SpecialIds

LITERT_TOKENIZERS = ("bpe", "unigram", "pretrained")
USER_DEFINED = 4  # ModelProto.SentencePiece.USER_DEFINED
BPE_MODEL = 2  # TrainerSpec.model_type of a BPE model


class Sides(NamedTuple):
    """A tokenizer's SentencePiece models and how their ids map to the model's (None: they are the model's)."""

    source: bytes  # the SentencePiece model that tokenizes
    target: bytes  # the one that detokenizes
    to_model: object  # int32 (source pieces,): each SentencePiece id's model id
    to_pieces: object  # int32 (vocab_size,): each model id's target SentencePiece id, -1 where it has none
    dropped: tuple  # the model ids left out of text
    ids: SpecialIds  # the model's padding and end ids


def check_litert_tokenizer(tokenizer):
    """Raises T2TError unless `tokenizer` is a SentencePiece model the LiteRT tokenizer reproduces exactly."""
    if tokenizer.kind not in LITERT_TOKENIZERS:
        raise T2TError(f"A LiteRT export holds a SentencePiece tokenizer (data.tokenizer bpe or unigram), but this "
                       f"model's tokenizer is {tokenizer.kind!r}: TF-Text has no TFLite op for our WordPiece "
                       "detokenization. Export it as a SavedModel (t2t-keras export --format saved_model).")
    if tokenizer.kind == "pretrained" and (tokenizer.language_codes or tokenizer.trailing_space):
        raise T2TError("A LiteRT export holds an OPUS-MT checkpoint's tokenizer, not a multilingual one's (NLLB, "
                       "M2M-100): its language codes and NLLB's final-space piece need string ops LiteRT lacks. "
                       "Export it as a SavedModel or a CTranslate2 model (--format saved_model or ctranslate2).")
    sides = litert_sides(tokenizer)
    for model_bytes in {sides.source, sides.target}:
        proto = parse_model(model_bytes)
        if proto.trainer_spec.byte_fallback or any(piece.type == USER_DEFINED for piece in proto.pieces):
            raise T2TError("A LiteRT export reproduces plain SentencePiece models, and this one uses byte fallback "
                           "or user-defined symbols: export it as a SavedModel (t2t-keras export --format "
                           "saved_model).")
    return parse_model(sides.source)


def litert_sides(tokenizer):
    """The `Sides` of a run's tokenizer: its one SentencePiece model, or an imported checkpoint's with their maps."""
    if tokenizer.kind != "pretrained":
        return Sides(tokenizer.model_bytes, tokenizer.model_bytes, None, None, (PAD_ID, BOS_ID), SpecialIds())
    ids = tokenizer.special_ids
    source, target = (tokenizer.sentencepiece_model(side) for side in ("source", "target"))
    vocabulary = {piece: index for index, piece in enumerate(tokenizer.pieces("source"))}
    unknown = tokenizer.manifest["source"]["unk"]
    to_model = np.array([vocabulary.get(piece.piece, unknown) for piece in parse_model(source).pieces], np.int32)
    spm_ids = {piece.piece: index for index, piece in enumerate(parse_model(target).pieces)}
    to_pieces = np.array([spm_ids.get(piece, -1) for piece in tokenizer.pieces("target")], np.int32)
    return Sides(source, target, to_model, to_pieces, tuple(tokenizer.skipped_ids) + (ids.pad,), ids)


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
        self.sides = litert_sides(tokenizer)
        self._pieces = tf_text.FastSentencepieceTokenizer(self.sides.target)
        self._source = self._pieces if self.sides.source == self.sides.target else \
            tf_text.FastSentencepieceTokenizer(self.sides.source)
        self._bpe = proto.trainer_spec.model_type == BPE_MODEL
        if self._bpe:
            characters, self._to_original = character_model(proto)
            self._characters = tf_text.FastSentencepieceTokenizer(characters)
            self._merges = merge_table(proto)

    def tokenize(self, strings):
        """int32 `(batch, width)` piece ids of tf.string `(batch,)`, the model's, right-padded with its padding id
        (no start or end id)."""
        if self._bpe:
            characters = self._characters.tokenize(strings)
            ids = tf.gather(tf.constant(self._to_original), characters.flat_values)
            ids = apply_merges(padded(ids, characters.row_splits), self._merges)  # PAD (0) after the pieces
            return self._model_ids(ids, ids != PAD_ID)
        pieces = self._source.tokenize(strings)
        ids = padded(pieces.flat_values, pieces.row_splits, -1)
        return self._model_ids(tf.maximum(ids, 0), ids >= 0)

    def _model_ids(self, pieces, real):
        """The model's ids of SentencePiece ids `pieces` where `real`, its padding id elsewhere."""
        if self.sides.to_model is not None:
            pieces = tf.gather(tf.constant(self.sides.to_model), pieces)
        return tf.where(real, pieces, self.sides.ids.pad)

    def detokenize(self, ids):
        """tf.string `(batch,)` text of int32 `(batch, length)` ids; from the first EOS on, ids are ignored, and
        the special ids are dropped (as the run's tokenizer's `detokenize`)."""
        ids = tf.cast(ids, tf.int32)
        after_eos = tf.math.cumsum(tf.cast(tf.equal(ids, self.sides.ids.eos), tf.int32), axis=1) > 0
        keep = tf.logical_not(after_eos)
        for dropped in self.sides.dropped:
            keep &= tf.not_equal(ids, dropped)
        if self.sides.to_pieces is not None:
            ids = tf.gather(tf.constant(self.sides.to_pieces), tf.clip_by_value(ids, 0, self.vocab_size - 1))
            keep &= ids >= 0
        lengths = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)
        row_splits = tf.concat([[0], tf.math.cumsum(lengths)], axis=0)
        pieces = tf.RaggedTensor.from_row_splits(tf.boolean_mask(ids, keep), row_splits, validate=False)
        return self._pieces.detokenize(pieces)


def padded(values, row_splits, pad=PAD_ID):
    """The rows of a ragged tensor (`values`, `row_splits`) as a dense int32 `(batch, width)`, `pad` on the right.

    Gathers and selects only: `RaggedTensor.to_tensor` would need a TF-Text custom op in LiteRT.
    """
    row_splits = tf.cast(row_splits, tf.int32)
    starts, lengths = row_splits[:-1], row_splits[1:] - row_splits[:-1]
    width = tf.reduce_max(tf.concat([lengths, [0]], axis=0))
    columns = tf.range(width)[None, :]
    values = tf.concat([tf.cast(values, tf.int32), [pad]], axis=0)  # index len(values) is valid, also for none
    dense = tf.gather(values, tf.minimum(starts[:, None] + columns, tf.shape(values)[0] - 1))
    return tf.where(columns < lengths[:, None], dense, pad)
