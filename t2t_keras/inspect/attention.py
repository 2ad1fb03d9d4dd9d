"""Attention weights of every layer and head for a source sentence and its translation.

The weights come from the model's own layers (`encode_with_attention` /
`decode_with_attention`), run in full over the whole target sequence,
the same computation as teacher-forced training with dropout off.

Axes are labelled with subword pieces: source pieces end with `</s>` (the
encoder input), target pieces start with the decoder's start id, `<s>` (the
decoder input). Row `t` of a decoder map is the decoder state that reads target
token `t` and predicts token `t + 1`. The ids are the model's own (`special_ids`)
and an imported checkpoint's layout (`decoding.layout`: NLLB's language codes).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from t2t_keras.decoding import greedy_decode
from t2t_keras.decoding.layout import layout_of, source_pieces, target_pieces
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.inspect.kinds import KINDS
from t2t_keras.special_ids import SpecialIds

DEFAULT_IDS = SpecialIds()



@dataclasses.dataclass
class AttentionMaps:
    """Attention weights of one sentence pair, without padding.

    Attributes:
        source_tokens: S source pieces, the last one `</s>`.
        target_tokens: T target pieces (decoder input), the first one `<s>`.
        encoder: float32 `(layers, heads, S, S)` encoder self-attention.
        decoder_self: float32 `(layers, heads, T, T)` masked decoder self-attention.
        cross: float32 `(layers, heads, T, S)` encoder-decoder attention.
        translation: the target text (the decoded hypothesis, or the given reference).
        source_text: the source text.
    """

    source_tokens: list
    target_tokens: list
    encoder: np.ndarray
    decoder_self: np.ndarray
    cross: np.ndarray
    translation: str
    source_text: str = ""

    def weights(self, kind):
        """`(layers, heads, queries, keys)` weights of `kind` (one of `KINDS`)."""
        return getattr(self, _checked_kind(kind))

    def axis_tokens(self, kind):
        """`(query_tokens, key_tokens)`: the labels of the rows and columns of `kind`."""
        kind = _checked_kind(kind)
        queries = self.source_tokens if kind == "encoder" else self.target_tokens
        keys = self.target_tokens if kind == "decoder_self" else self.source_tokens
        return queries, keys

    @property
    def num_heads(self):
        return self.encoder.shape[1]


@dataclasses.dataclass
class BatchAttention:
    """Attention weights of a padded batch, as the model computes them.

    Attributes:
        source: int32 `(batch, S)` encoder input, EOS-terminated, padded.
        target_in: int32 `(batch, T)` decoder input, the start id first, padded.
        encoder: `(batch, layers, heads, S, S)`.
        decoder_self: `(batch, layers, heads, T, T)`.
        cross: `(batch, layers, heads, T, S)`.
        ids: the model's `SpecialIds` (its padding, start and end ids).
    """

    source: np.ndarray
    target_in: np.ndarray
    encoder: np.ndarray
    decoder_self: np.ndarray
    cross: np.ndarray
    ids: SpecialIds = DEFAULT_IDS

    def weights(self, kind):
        return getattr(self, _checked_kind(kind))

    def query_ids(self, kind):
        """`(batch, queries)` ids read at the query positions of `kind`."""
        return self.source if _checked_kind(kind) == "encoder" else self.target_in

    def key_ids(self, kind):
        """`(batch, keys)` ids read at the key positions of `kind`."""
        return self.target_in if _checked_kind(kind) == "decoder_self" else self.source

    def example(self, index, tokenizer, translation="", source_text=""):
        """The `AttentionMaps` of row `index`, with padding removed and pieces as labels."""
        source_len = int(np.sum(self.source[index] != self.ids.pad))
        target_len = int(np.sum(self.target_in[index] != self.ids.pad))
        return AttentionMaps(
            source_tokens=pieces(tokenizer, self.source[index, :source_len]),
            target_tokens=pieces(tokenizer, self.target_in[index, :target_len]),
            encoder=self.encoder[index, :, :, :source_len, :source_len],
            decoder_self=self.decoder_self[index, :, :, :target_len, :target_len],
            cross=self.cross[index, :, :, :target_len, :source_len],
            translation=translation,
            source_text=source_text,
        )


def _checked_kind(kind):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}. Received: kind={kind!r}")
    return kind


def pieces(tokenizer, ids):
    """The pieces of a 1-D id sequence, as Python strings."""
    return [p.decode("utf-8") for p in tokenizer.id_to_piece(tf.constant(ids, tf.int32)).numpy()]


def _pad_rows(rows, prefix=(), suffix=(), pad=DEFAULT_IDS.pad):
    """int32 `(len(rows), width)` of `prefix + row + suffix`, right-padded with `pad`."""
    rows = [list(prefix) + list(row) + list(suffix) for row in rows]
    batch = np.full((len(rows), max(len(row) for row in rows)), pad, np.int32)
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    return batch


def _layout(tokenizer, ids, layout):
    return layout if layout is not None else layout_of(tokenizer, ids)


def encode_sources(tokenizer, texts, ids=DEFAULT_IDS, layout=None):
    """int32 `(batch, S)` encoder inputs: pieces between the layout's ids (ours: + EOS), right-padded."""
    layout = _layout(tokenizer, ids, layout)
    pieces = source_pieces(tokenizer, tf.constant(list(texts), tf.string)).to_list()
    return _pad_rows(pieces, layout.source_prefix, layout.source_suffix, ids.pad)


def encode_targets(tokenizer, texts, ids=DEFAULT_IDS, layout=None):
    """int32 `(batch, T)` decoder inputs of reference texts: the start id, a forced prefix, the pieces, padded."""
    layout = _layout(tokenizer, ids, layout)
    pieces = target_pieces(tokenizer, tf.constant(list(texts), tf.string)).to_list()
    return _pad_rows(pieces, (ids.decoder_start,) + layout.target_prefix, (), ids.pad)


def decoder_inputs(tokens, ids=DEFAULT_IDS):
    """Decoder inputs `(batch, T)` for decoded `tokens` `(batch, L)`: the start id + the tokens before EOS.

    Trailing all-padding columns are dropped.
    """
    tokens = np.asarray(tokens, np.int32)
    ended = np.cumsum(tokens == ids.eos, axis=1) > 0
    rows = [row[~stop & (row != ids.pad)] for row, stop in zip(tokens, ended)]
    return _pad_rows(rows, prefix=(ids.decoder_start,), pad=ids.pad)


def batch_attention(model, source, target_in):
    """Runs encoder and decoder on a padded batch; returns every layer's weights as `BatchAttention`."""
    source = tf.convert_to_tensor(source, tf.int32)
    target_in = tf.convert_to_tensor(target_in, tf.int32)
    encoded = model.encode_with_attention(source, training=False)
    decoded = model.decode_with_attention(target_in, encoded.output, model.source_mask(source), training=False)

    def stack(weights):  # list over layers of (batch, heads, q, k) -> (batch, layers, heads, q, k)
        return np.stack([np.asarray(w, np.float32) for w in weights], axis=1)

    return BatchAttention(
        source=source.numpy(),
        target_in=target_in.numpy(),
        encoder=stack(encoded.weights),
        decoder_self=stack(decoded.self_weights),
        cross=stack(decoded.cross_weights),
        ids=_ids(model),
    )


def _ids(model):
    return getattr(model, "special_ids", None) or DEFAULT_IDS


def translate_batch(model, source, max_extra_length=DEFAULTS.max_extra_length, target_prefix=()):
    """Greedy hypotheses `(batch, L)` of an encoded source batch (EOS-terminated, padded), each starting with the
    forced `target_prefix` (a multilingual model's target language)."""
    forced = None if not target_prefix else np.tile(np.asarray(target_prefix, np.int32), (len(source), 1))
    return greedy_decode(model, source, max_extra_length=max_extra_length, forced_prefix=forced)["tokens"].numpy()


def pad_columns(ids, count, pad=DEFAULT_IDS.pad):
    """`ids` `(batch, length)` with `count` more columns of `pad` on the right."""
    return np.pad(ids, ((0, 0), (0, count)), constant_values=pad)


def extract_batch(model, tokenizer, source_texts, target_texts=None, max_extra_length=DEFAULTS.max_extra_length,
                  extra_padding=0):
    """Attention of a batch of sentences against references, or against greedy translations.

    Args:
        extra_padding: PAD columns appended to both the source and the decoder
            input, so that even a batch of equal-length sentences exercises the
            padding masks.

    Returns:
        `(BatchAttention, translations)`; `translations` are the target texts.
    """
    ids = _ids(model)
    layout = layout_of(tokenizer, ids)
    source = pad_columns(encode_sources(tokenizer, source_texts, ids, layout), extra_padding, ids.pad)
    if target_texts is None:
        tokens = translate_batch(model, source, max_extra_length, layout.target_prefix)
        target_in = decoder_inputs(tokens, ids)
        translations = [t.decode("utf-8") for t in tokenizer.detokenize(tokens).numpy()]
    else:
        if len(target_texts) != len(source_texts):
            raise ValueError(
                f"Need one target text per source text. Received: {len(source_texts)} sources and "
                f"{len(target_texts)} targets."
            )
        target_in = encode_targets(tokenizer, target_texts, ids, layout)
        translations = list(target_texts)
    return batch_attention(model, source, pad_columns(target_in, extra_padding, ids.pad)), translations


def extract_attention(model, tokenizer, source_text, target_text=None, max_extra_length=DEFAULTS.max_extra_length):
    """Attention weights of every layer and head for one sentence pair.

    Args:
        model: a built `Transformer`.
        tokenizer: the run's `Tokenizer`.
        source_text: the source sentence.
        target_text: a reference translation; None translates `source_text`
            greedily and inspects the model's own hypothesis.
        max_extra_length: output limit of the greedy translation (input length + this).

    Returns:
        `AttentionMaps`.
    """
    targets = None if target_text is None else [target_text]
    batch, translations = extract_batch(model, tokenizer, [source_text], targets, max_extra_length)
    return batch.example(0, tokenizer, translations[0], source_text)
