"""Forced decoding: the negative log-likelihood of given target tokens under teacher forcing.

The target is fed as the decoder's start id + pieces and the log-probability of every next
piece, EOS included, is read from the model's float32 log-softmax. Nothing is
masked or renormalised, so a sum equals the log-probability beam search and
greedy search give the same tokens (`beam_search(...)["log_probs"]`). The ids are the model's own
(`special_ids`), and a multilingual model's target starts with its language code, as its Hugging Face
tokenizer makes labels (`layout`): that code's log-probability counts here, where a search forces it with 0.
What an artifact's `score` gives back is `request.Score`.
"""

import tensorflow as tf

from t2t_keras.decoding.layout import Layout
from t2t_keras.special_ids import SpecialIds

DEFAULT_IDS = SpecialIds()


def token_nll(model, source, target_in, target_out):
    """Teacher-forced negative log-likelihood `(batch, target_len)` float32, 0 on padding.

    Args:
        model: a `Transformer`.
        source: int `(batch, source_len)` pieces + EOS, padded with the model's padding id.
        target_in: int `(batch, target_len)` start id + pieces, padded.
        target_out: int `(batch, target_len)` pieces + EOS, padded.
    """
    logits = model((source, target_in), training=False)  # float32 (batch, target_len, vocab)
    log_probs = tf.nn.log_softmax(logits)
    target_out = tf.cast(target_out, tf.int32)
    picked = tf.gather(log_probs, target_out, batch_dims=2)
    return tf.where(tf.not_equal(target_out, model.pad_id), -picked, 0.0)


def teacher_forcing_rows(source_pieces, target_pieces, ids=DEFAULT_IDS, layout=None):
    """Python lists: `source` (`layout`'s ids around the pieces; None: pieces + EOS), `target_in` (start id + the
    target before its EOS) and `target_out` (a forced prefix, pieces, EOS) rows, with the model's `ids`."""
    layout = Layout((), (ids.eos,), ()) if layout is None else layout
    sources = [layout.source(p, len(p) + len(layout.source_prefix) + len(layout.source_suffix))[0]
               for p in source_pieces]
    targets_out = [layout.target(p, ids.eos) for p in target_pieces]
    return sources, [[ids.decoder_start] + row[:-1] for row in targets_out], targets_out


def teacher_forcing_targets(pieces, ids=DEFAULT_IDS, prefix=()):
    """Dense `target_in` and `target_out` from a RaggedTensor of target pieces (in-graph), with the model's `ids`
    and the forced `prefix` ids (a multilingual model's target language; an int32 tensor too) first."""
    column = tf.ones_like(pieces[:, :1])
    rows = tf.cast(pieces.nrows(), tf.int32)
    prefix = tf.RaggedTensor.from_tensor(tf.tile(tf.cast(tf.reshape(prefix, [1, -1]), pieces.dtype), [rows, 1]))
    target_out = tf.concat([prefix, pieces, column * ids.eos], axis=1)
    target_in = tf.concat([column * ids.decoder_start, target_out[:, :-1]], axis=1)
    return target_in.to_tensor(default_value=ids.pad), target_out.to_tensor(default_value=ids.pad)
