"""Choosing the next token: argmax, or sampling with temperature and top-k."""

import tensorflow as tf

from t2t_keras.decoding.common import NEG_INF


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


def step_seed(seed, step):
    """The stateless seed `[seed, step]` of one decoding step."""
    return tf.stack([tf.cast(seed, tf.int32), tf.cast(step, tf.int32)])


def random_seed():
    """A fresh scalar seed, drawn when the caller gave none."""
    return tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int32)


def sample_tokens(log_probs, seed, temperature=1.0, top_k=0):
    """`(batch,)` int32 tokens drawn from softmax(log_probs / temperature) over the top k.

    `temperature` <= 0 falls back to argmax. `seed` is a stateless seed of shape (2,).
    """
    temperature = tf.cast(temperature, log_probs.dtype)
    scaled = top_k_filter(log_probs, top_k) / tf.maximum(temperature, 1e-6)
    sampled = tf.random.stateless_categorical(scaled, 1, seed, dtype=tf.int32)[:, 0]
    return tf.where(temperature > 0, sampled, argmax_tokens(log_probs))


def argmax_tokens(log_probs):
    """`(batch,)` int32 most likely tokens (lowest id on ties)."""
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
