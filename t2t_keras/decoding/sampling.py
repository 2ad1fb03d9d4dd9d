"""Choosing the next token: argmax, or a sample with temperature, top-k, top-p (nucleus) and epsilon cuts.

A sample is drawn from softmax(log p / temperature) among the pieces every cut keeps, renormalised:

* top-k: the k most likely pieces (0: all);
* top-p (nucleus, Holtzman et al. 2020): the most likely pieces whose probabilities, in decreasing order, reach
  `top_p` (the piece that crosses it included; 1: all);
* epsilon (Hewitt et al. 2022, "Truncation sampling as language model desmoothing"): the pieces of probability
  at least `epsilon` (0: all).

The cuts are read off the same tempered distribution, and each keeps the most likely piece, so a sample always
has a piece to draw.

Draws are repeatable and independent of how lines are batched: a row's draw at a step is a hash of the seed, the
step and the row's key (`row_keys`: a hash of its source ids and of which of a line's samples it is), turned
into a uniform number and looked up in the row's cumulative distribution. The same sentence, seed and sample
index give the same sample in any batch, at any position, through a run directory or its SavedModel.
"""

import tensorflow as tf

from t2t_keras.decoding.common import NEG_INF

MASK32 = 0xFFFFFFFF  # hashes are kept to 32 bits in int64 arithmetic (no unsigned ops needed)
_MULTIPLIER = 0x45D9F3B  # the 32-bit integer mixing constant of a well-known hash finaliser


def top_k_filter(logits, top_k):
    """Keeps the `top_k` largest logits of each row and sets the rest to -inf; 0 keeps all.

    `top_k` may be a tensor: the threshold comes from a sort, so XLA needs no
    static k.
    """
    top_k = tf.cast(top_k, tf.int32)
    vocab = tf.shape(logits)[-1]
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")
    kth = tf.gather(ordered, tf.clip_by_value(top_k, 1, vocab) - 1, axis=-1)[..., None]
    drop = tf.logical_and(top_k > 0, logits < kth)
    return tf.where(drop, tf.constant(NEG_INF, logits.dtype), logits)


def kept_pieces(log_probs, top_k=0, top_p=1.0, epsilon=0.0):
    """bool `(batch, vocab)`: the pieces of the distribution softmax(log_probs) that top-k, top-p and epsilon keep
    (see the module docstring); each argument may be a tensor."""
    probs = tf.nn.softmax(log_probs, axis=-1)
    vocab = tf.shape(probs)[-1]
    ordered = tf.sort(probs, axis=-1, direction="DESCENDING")
    top_k = tf.cast(top_k, tf.int32)
    kth = tf.gather(ordered, tf.clip_by_value(top_k, 1, vocab) - 1, axis=-1)[..., None]
    keep = (top_k <= 0) | (probs >= kth)
    top_p = tf.cast(top_p, probs.dtype)
    before = tf.cumsum(ordered, axis=-1, exclusive=True)  # the mass of the more likely pieces
    smallest = tf.reduce_min(tf.where(before < top_p, ordered, 2.0), axis=-1, keepdims=True)
    keep &= (top_p >= 1.0) | (probs >= smallest)
    largest = ordered[:, :1]
    return keep & ((probs >= tf.cast(epsilon, probs.dtype)) | (probs >= largest))


def mix(values):
    """A 32-bit integer hash of each of `values` (int64, in [0, 2**32)), as int64."""
    values = tf.bitwise.bitwise_and(tf.cast(values, tf.int64), MASK32)
    for _ in range(2):
        values = tf.bitwise.bitwise_xor(values, tf.bitwise.right_shift(values, 16))
        values = tf.bitwise.bitwise_and(values * _MULTIPLIER, MASK32)
    return tf.bitwise.bitwise_xor(values, tf.bitwise.right_shift(values, 16))


def row_keys(source, pad, copies=1):
    """int64 `(batch * copies,)`: the key of each row of `source` (int `(batch, width)`, padded with `pad`) and of
    each of its `copies` samples, row by row (row 0's copies first). Padding does not change a row's key."""
    source = tf.cast(source, tf.int64)
    positions = tf.range(tf.shape(source, out_type=tf.int64)[1], dtype=tf.int64)[None, :]
    terms = mix(source * 0x9E3779B1 + mix(positions + 1))
    content = tf.reduce_sum(tf.where(source != pad, terms, 0), axis=1)  # (batch,), in int64: no overflow
    content = tf.repeat(mix(content), copies, axis=0)
    copy = tf.tile(tf.range(tf.cast(copies, tf.int64), dtype=tf.int64), [tf.shape(source)[0]])
    return mix(tf.bitwise.bitwise_xor(content, mix(copy + 0x51ED27)))


def uniform_draws(seed, step, keys):
    """float32 `(batch,)` in [0, 1): one number per row of `keys` for a decoding `step` under `seed`."""
    state = mix(tf.bitwise.bitwise_xor(mix(tf.cast(seed, tf.int64)), tf.cast(step, tf.int64)))
    bits = mix(tf.bitwise.bitwise_xor(mix(keys), state))
    return tf.cast(tf.bitwise.right_shift(bits, 8), tf.float32) / float(1 << 24)


def random_seed():
    """A fresh scalar seed, drawn when the caller gave none."""
    return tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int32)


def sample_tokens(log_probs, seed, step, keys, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0):
    """`(batch,)` int32 tokens drawn from softmax(log_probs / temperature) among the pieces the cuts keep.

    `temperature` <= 0 falls back to argmax. `seed` is a scalar int, `step` the decoding step, `keys` int64
    `(batch,)` the rows' keys (`row_keys`). A piece the cuts drop, or of probability 0, is never drawn.
    """
    temperature = tf.cast(temperature, log_probs.dtype)
    scaled = log_probs / tf.maximum(temperature, 1e-6)
    keep = kept_pieces(scaled, top_k, top_p, epsilon)
    probs = tf.where(keep, tf.nn.softmax(tf.where(keep, scaled, NEG_INF), axis=-1), 0.0)
    cumulative = tf.cumsum(probs, axis=-1)  # (batch, vocab)
    target = uniform_draws(seed, step, keys)[:, None] * cumulative[:, -1:]
    past = cumulative > target  # the first piece past the target is drawn; a piece of probability 0 never is
    drawn = tf.argmax(tf.cast(past, tf.int32), axis=-1, output_type=tf.int32)
    drawn = tf.where(tf.reduce_any(past, axis=-1), drawn, argmax_tokens(log_probs))
    return tf.where(temperature > 0, drawn, argmax_tokens(log_probs))


def argmax_tokens(log_probs):
    """`(batch,)` int32 most likely tokens (lowest id on ties)."""
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
