"""T5's relative position bias: a learned scalar per head for each bucket of key position minus query position."""

import math

import keras
from keras import ops


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """The bucket of each int32 `relative_position` (key position - query position), as T5 computes it.

    Bidirectional: half the buckets for keys after the query, half for those before; causal: keys after the
    query (masked anyway) share bucket 0. Within a half, distances below half its buckets have a bucket each,
    larger ones share logarithmically wider buckets up to `max_distance`, beyond which all share the last.
    """
    relative_position = ops.cast(relative_position, "int32")
    buckets = ops.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + ops.cast(relative_position > 0, "int32") * num_buckets
        distance = ops.abs(relative_position)
    else:
        distance = -ops.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    # float32 as in T5 (the logarithm of 0 is never used: those distances are exact)
    scaled = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + ops.cast(scaled * (num_buckets - max_exact), "int32")
    large = ops.minimum(large, num_buckets - 1)
    return buckets + ops.where(distance < max_exact, distance, large)


@keras.saving.register_keras_serializable(package="t2t_keras")
class RelativePositionBias(keras.layers.Layer):
    """The `(1, heads, query_len, key_len)` bias T5 adds to the attention scores of one stack's self-attention.

    One table `(num_buckets, num_heads)` serves every layer of a stack (T5), or each layer has its own (umT5): the
    encoder's are bidirectional, the decoder's causal; cross-attention has none.

    Args:
        num_heads: h.
        num_buckets: T5's `relative_attention_num_buckets` (32).
        max_distance: T5's `relative_attention_max_distance` (128).
        bidirectional: True in the encoder, False in the decoder.

    `bias(query_length, key_length, query_start=0)` (also the call, with keywords: Keras passes only tensors
    positionally):
        query_length, key_length: the lengths (ints or scalar tensors).
        query_start: the position of the first query (a decoding step's: the positions decoded before it).

    Returns:
        `(1, num_heads, query_length, key_length)` in the layer's compute dtype.

    References:
        Shaw et al., 2018; Raffel et al., 2020, §2.1 (T5).
    """

    def __init__(self, num_heads, num_buckets=32, max_distance=128, bidirectional=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(name="embeddings", shape=(self.num_buckets, self.num_heads),
                                          initializer=keras.initializers.RandomNormal(stddev=self.num_heads ** -0.5))

    def call(self, query_length=None, key_length=None, query_start=0):
        return self.bias(query_length, key_length, query_start)

    def bias(self, query_length, key_length, query_start=0):
        """See the class docstring."""
        if not self.built:
            self.build()
        queries = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(query_start, "int32")
        keys = ops.arange(key_length, dtype="int32")[None, :]
        buckets = relative_position_bucket(keys - queries, self.bidirectional, self.num_buckets, self.max_distance)
        values = ops.take(ops.cast(self.embeddings, self.compute_dtype), buckets, axis=0)  # (query, key, heads)
        return ops.expand_dims(ops.transpose(values, (2, 0, 1)), axis=0)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "num_buckets": self.num_buckets,
                       "max_distance": self.max_distance, "bidirectional": self.bidirectional})
        return config
