"""What a translation's quality estimate reads: features of one teacher-forced pass over the chosen output.

The translation (its text, tokenized again, as `score` does: `decoding.forced`) is fed to the decoder once; from
the output distributions at every position, EOS included, come

    mean_log_prob   the length-normalised log-probability: the mean of the tokens' log-probabilities
    min_log_prob    the lowest token log-probability (one bad word in a fluent sentence)
    mean_entropy    the mean entropy, in nats, of the output distributions along the output (the model's doubt)
    length_ratio    output pieces / source pieces (EOS and language codes not counted; a source of none counts 1)
    source_unknown  unknown pieces (the model's `unk` id) in the source
    target_unknown  unknown pieces in the output

and, where the translation came from MBR decoding, `expected_utility` (its score there). The same function
runs on a run's model (`artifacts.run`) and inside a SavedModel's `translate` signature (`export`), so the two
estimate alike; CTranslate2's `score_batch` gives the token log-probabilities but no distributions, so its
estimate uses the features without `mean_entropy` (`features_from_token_log_probs`, NumPy's: the CTranslate2
artifact runs without TensorFlow, which the functions of a model's logits import when called).
"""

import numpy as np

FEATURES = ("mean_log_prob", "min_log_prob", "mean_entropy", "length_ratio", "source_unknown", "target_unknown")
EXPECTED_UTILITY = "expected_utility"  # MBR decoding's score of the chosen candidate
ALL_FEATURES = FEATURES + (EXPECTED_UTILITY,)
WITHOUT_DISTRIBUTIONS = tuple(name for name in FEATURES if name != "mean_entropy")  # token log-probs only


def forced_features(model, source, target_in, target_out, source_extra=1, target_extra=1):
    """Features `(batch, len(FEATURES))` float32 of teacher-forced translations, columns in `FEATURES` order.

    Args:
        model: a `Transformer` (its `special_ids` give padding and unknown ids).
        source: int `(batch, source_len)`, the model's source rows (pieces and the ids around them), padded.
        target_in, target_out: int `(batch, target_len)` as `decoding.forced.teacher_forcing_targets` makes them.
        source_extra: ids around the source pieces in a row (EOS, a language code); target_extra: ids besides
            the pieces in `target_out` (EOS, a forced language code).
    """
    import tensorflow as tf

    logits = model((source, target_in), training=False)  # float32 (batch, target_len, vocab)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
    return features_from_log_probs(log_probs, source, target_out, model.special_ids, source_extra, target_extra)


def features_from_log_probs(log_probs, source, target_out, ids, source_extra=1, target_extra=1):
    """`forced_features` from the log-probabilities `(batch, target_len, vocab)` of the output distributions."""
    import tensorflow as tf

    target_out = tf.cast(target_out, tf.int32)
    mask = tf.cast(tf.not_equal(target_out, ids.pad), tf.float32)  # (batch, target_len)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    picked = tf.gather(log_probs, target_out, batch_dims=2)  # (batch, target_len)
    # -sum p log p; a probability of 0 (log -inf) adds 0, not NaN.
    entropy = -tf.reduce_sum(tf.math.multiply_no_nan(log_probs, tf.exp(log_probs)), axis=-1)
    lowest = tf.reduce_min(tf.where(mask > 0, picked, tf.float32.max), axis=1)
    source = tf.cast(source, tf.int32)
    source_pieces = tf.reduce_sum(tf.cast(tf.not_equal(source, ids.pad), tf.float32), axis=1) - source_extra
    target_pieces = tf.maximum(tf.reduce_sum(mask, axis=1) - target_extra, 0.0)
    columns = [tf.reduce_sum(picked * mask, axis=1) / count, tf.minimum(lowest, 0.0),
               tf.reduce_sum(entropy * mask, axis=1) / count,
               target_pieces / tf.maximum(source_pieces, 1.0), _count(source, ids.unk),
               _count(target_out, ids.unk)]
    return tf.stack(columns, axis=1)


def features_from_token_log_probs(token_log_probs, source_pieces, target_pieces, source_unknown, target_unknown):
    """The features of `WITHOUT_DISTRIBUTIONS` (a `dict` of name -> float) of one translation from its tokens'
    log-probabilities (EOS included), its piece counts and its unknown pieces (e.g. CTranslate2's `score_batch`)."""
    values = np.asarray(token_log_probs, np.float64)
    return {"mean_log_prob": float(values.mean()) if values.size else 0.0,
            "min_log_prob": float(min(values.min(), 0.0)) if values.size else 0.0,
            "length_ratio": target_pieces / max(source_pieces, 1), "source_unknown": float(source_unknown),
            "target_unknown": float(target_unknown)}


def feature_rows(matrix, names=FEATURES, utilities=None):
    """Rows of a features matrix as dicts of name -> float, with `expected_utility` where `utilities` is given."""
    rows = [{name: float(value) for name, value in zip(names, row)} for row in np.asarray(matrix)]
    if utilities is not None:
        for row, utility in zip(rows, utilities):
            row[EXPECTED_UTILITY] = float(utility)
    return rows


def _count(ids, wanted):
    import tensorflow as tf

    return tf.reduce_sum(tf.cast(tf.equal(ids, wanted), tf.float32), axis=1)
