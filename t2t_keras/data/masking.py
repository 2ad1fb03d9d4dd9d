"""BERT's masked-language-model corruption of token ids, inside tf.data (Devlin et al., 2019, §3.1).

Of the regular tokens (not padding or the special ids), a share `rate` is
chosen; of those, 80% become the mask id, 10% a random regular token and 10%
stay as they are. The model must predict the original token at every chosen
position, and only there: the chosen positions get weight 1, all others 0.

The vocabularies here reserve no separate `[MASK]` piece: `mask_id` defaults
to UNK, which a SentencePiece vocabulary with full character coverage emits
only for characters it never saw.
"""

import tensorflow as tf

from t2t_keras.special_ids import EOS_ID, UNK_ID

FIRST_REGULAR_ID = EOS_ID + 1


def mask_tokens(ids, seed, vocab_size, rate=0.15, mask_id=UNK_ID):
    """`(inputs, labels, weights)` for int `ids` `(batch, length)`.

    Args:
        ids: token ids, padded with 0.
        seed: int32 `(2,)` seed of the stateless random draws (same seed, same masking).
        vocab_size: random replacements are drawn from the regular ids below it.
        rate: share of the regular tokens chosen for prediction.
        mask_id: the id that replaces 80% of the chosen tokens.

    Returns:
        `inputs`: the corrupted ids; `labels`: `ids`; `weights`: float32, 1 at
        the chosen positions and 0 elsewhere.
    """
    ids = tf.convert_to_tensor(ids, tf.int32)
    seed = tf.convert_to_tensor(seed, tf.int32)
    shape = tf.shape(ids)
    chosen = (ids >= FIRST_REGULAR_ID) & (tf.random.stateless_uniform(shape, seed) < rate)
    draw = tf.random.stateless_uniform(shape, seed + 1)
    random_ids = tf.random.stateless_uniform(shape, seed + 2, minval=FIRST_REGULAR_ID, maxval=vocab_size,
                                             dtype=tf.int32)
    inputs = tf.where(chosen & (draw < 0.8), mask_id, ids)
    inputs = tf.where(chosen & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)
    return inputs, ids, tf.cast(chosen, tf.float32)


def masked_lm_batches(token_batches, vocab_size, seed, rate=0.15, mask_id=UNK_ID):
    """Maps a dataset of int `(batch, length)` id batches to `(inputs, labels, weights)` for `model.fit`.

    Batch `i` is masked with the seed `(seed, i)`, so the corruption is the
    same on every pass over the same batches.
    """
    def corrupt(index, ids):
        return mask_tokens(ids, tf.stack([tf.cast(seed, tf.int32), tf.cast(index, tf.int32)]), vocab_size, rate,
                           mask_id)

    return token_batches.enumerate().map(corrupt, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
