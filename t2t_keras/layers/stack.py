"""What the encoder and decoder stacks share: N identical blocks, for pre-LN a final LayerNorm, and T5's relative
position bias."""

import keras

from t2t_keras.layers.relative_position_bias import RelativePositionBias
from t2t_keras.layers.sublayer_connection import normalization_layer


class TransformerStack(keras.layers.Layer):
    """Base of `Encoder` and `Decoder` (§3.1): `num_layers` blocks of one kind.

    Args:
        num_layers: N.
        block_config: keyword arguments of each block (see `TransformerBlock`).
        relative_buckets: T5's relative position bias with this many buckets, one table for the stack that
            every block's self-attention adds (`RelativePositionBias`: bidirectional in the encoder, causal in
            the decoder); 0: none.
        relative_max_distance: the distance from which all share the last bucket.
    """

    block_class = None  # set by subclasses
    bidirectional = True  # whether the relative positions see keys after the query (the decoder's: no)

    def __init__(self, num_layers, block_config=None, relative_buckets=0, relative_max_distance=128, **kwargs):
        super().__init__(**kwargs)
        if num_layers <= 0:
            raise ValueError(f"num_layers must be positive. Received: num_layers={num_layers}")
        self.num_layers = num_layers
        self.block_config = dict(block_config or {})
        self.relative_buckets = relative_buckets
        self.relative_max_distance = relative_max_distance
        # One attribute per block rather than a list: tf.train.Checkpoint does not
        # follow Keras' tracked lists, and checkpoints must hold every weight.
        for i in range(num_layers):
            setattr(self, f"block_{i}", self.block_class(**self.block_config, dtype=self.dtype_policy,
                                                          name=f"block_{i}"))
        # Pre-LN blocks leave their output un-normalised; the stack normalises once at the end.
        self.normalize_first = self.block_config.get("normalize_first", False)
        self.final_norm = None
        if self.normalize_first:
            self.final_norm = normalization_layer(
                self.block_config.get("normalization", "layer"), self.block_config.get("layer_norm_epsilon", 1e-6),
                self.dtype_policy, "final_norm",
            )
        self.relative_bias = None
        if relative_buckets:
            self.relative_bias = RelativePositionBias(
                self.block_config["num_heads"], relative_buckets, relative_max_distance, self.bidirectional,
                dtype=self.dtype_policy, name="relative_bias")

    @property
    def blocks(self):
        return [getattr(self, f"block_{i}") for i in range(self.num_layers)]

    def build_shared(self, input_shape):
        """Builds what the blocks do not hold: the final norm and the relative position table."""
        if self.final_norm is not None:
            self.final_norm.build(input_shape)
        if self.relative_bias is not None:
            self.relative_bias.build()

    def position_bias(self, query_length, key_length, query_start=0):
        """The relative position bias `(1, heads, query_length, key_length)`, or None without one."""
        if self.relative_bias is None:
            return None
        return self.relative_bias.bias(query_length, key_length, query_start)

    def _finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "block_config": self.block_config,
                       "relative_buckets": self.relative_buckets, "relative_max_distance": self.relative_max_distance})
        return config
