"""Boolean attention masks (§3.2.3), built in one place.

Convention: `True` means "may attend". Masks are applied by Keras' dtype-aware
masked softmax, never by adding a hand-made large negative number.
"""

from keras import ops


def padding_mask(token_ids, pad_id=0):
    """`(batch, length)` mask that is True on real tokens and False on padding."""
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length=None, offset=0):
    """`(query_length, key_length)` mask letting query `i` see keys `j <= i + offset`.

    `offset` is the position of the first query, so incremental decoding of one
    token at step `t` against a cache of `key_length` slots uses `offset=t`:
    slots after `t` are still empty and stay masked.
    """
    key_length = query_length if key_length is None else key_length
    query_positions = ops.arange(query_length)[:, None] + offset
    key_positions = ops.arange(key_length)[None, :]
    return ops.less_equal(key_positions, query_positions)


def attention_mask(key_padding=None, causal=None):
    """Combines a `(batch, key_len)` padding mask and a `(query_len, key_len)` causal mask.

    Returns a boolean mask broadcastable to `(batch, query_len, key_len)`, or
    None when neither is given.
    """
    mask = None
    if key_padding is not None:
        # expand_dims, not [:, None, :]: LiteRT has no builtin strided slice that adds an axis to a bool tensor
        mask = ops.expand_dims(key_padding, 1)  # (batch, 1, key_len)
    if causal is not None:
        causal = ops.expand_dims(causal, 0)  # (1, query_len, key_len)
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask
