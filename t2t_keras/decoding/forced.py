"""Forced decoding: the negative log-likelihood of given target tokens under teacher forcing.

The target is fed as BOS + pieces and the log-probability of every next
piece, EOS included, is read from the model's float32 log-softmax. Nothing is
masked or renormalised, so a sum equals the log-probability beam search and
greedy search give the same tokens (`beam_search(...)["log_probs"]`).
"""

import dataclasses

import tensorflow as tf

from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID


@dataclasses.dataclass(frozen=True)
class Score:
    """Negative log-likelihood of one translation: `nll` in nats, over `len(token_nll)` tokens (EOS included)."""

    nll: float
    token_nll: list

    @property
    def nll_per_token(self):
        return self.nll / len(self.token_nll)


def token_nll(model, source, target_in, target_out):
    """Teacher-forced negative log-likelihood `(batch, target_len)` float32, 0 on padding.

    Args:
        model: a `Transformer`.
        source: int `(batch, source_len)` pieces + EOS, padded with 0.
        target_in: int `(batch, target_len)` BOS + pieces, padded with 0.
        target_out: int `(batch, target_len)` pieces + EOS, padded with 0.
    """
    logits = model((source, target_in), training=False)  # float32 (batch, target_len, vocab)
    log_probs = tf.nn.log_softmax(logits)
    target_out = tf.cast(target_out, tf.int32)
    picked = tf.gather(log_probs, target_out, batch_dims=2)
    return tf.where(tf.not_equal(target_out, PAD_ID), -picked, 0.0)


def teacher_forcing_rows(source_pieces, target_pieces):
    """Python lists: `source` (pieces + EOS), `target_in` (BOS + pieces), `target_out` (pieces + EOS) rows."""
    return ([list(p) + [EOS_ID] for p in source_pieces], [[BOS_ID] + list(p) for p in target_pieces],
            [list(p) + [EOS_ID] for p in target_pieces])


def teacher_forcing_targets(pieces):
    """Dense `target_in` and `target_out` from a RaggedTensor of target pieces (in-graph)."""
    column = tf.ones_like(pieces[:, :1])
    target_in = tf.concat([column * BOS_ID, pieces], axis=1)
    target_out = tf.concat([pieces, column * EOS_ID], axis=1)
    return target_in.to_tensor(default_value=PAD_ID), target_out.to_tensor(default_value=PAD_ID)
