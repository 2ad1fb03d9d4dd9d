"""What the encoder and decoder stacks share: N identical blocks, for pre-LN a final LayerNorm, and T5's relative
position bias (one table for the stack, or umT5's one per layer)."""

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
        relative_bias_per_layer: a table of its own in every block's self-attention instead of the stack's one
            (umT5, Chung et al., 2023); without `relative_buckets` it changes nothing.
    """

    block_class = None  # set by subclasses
    bidirectional = True  # whether the relative positions see keys after the query (the decoder's: no)

    def __init__(self, num_layers, block_config=None, relative_buckets=0, relative_max_distance=128,
                 relative_bias_per_layer=False, **kwargs):
        super().__init__(**kwargs)
        if num_layers <= 0:
            raise ValueError(f"num_layers must be positive. Received: num_layers={num_layers}")
        self.num_layers = num_layers
        self.block_config = dict(block_config or {})
        self.relative_buckets = relative_buckets
        self.relative_max_distance = relative_max_distance
        self.relative_bias_per_layer = relative_bias_per_layer
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
        self._make_relative_biases()

    def _make_relative_biases(self):
        """`relative_bias`, the stack's one table (None without one or with a table per layer), or one attribute
        per block, `relative_bias_0` ..., as for the blocks themselves."""
        self.relative_bias = None
        if not self.relative_buckets:
            return
        names = [f"relative_bias_{i}" for i in range(self.num_layers)] if self.relative_bias_per_layer \
            else ["relative_bias"]
        for name in names:
            setattr(self, name, RelativePositionBias(
                self.block_config["num_heads"], self.relative_buckets, self.relative_max_distance, self.bidirectional,
                dtype=self.dtype_policy, name=name))

    @property
    def blocks(self):
        return [getattr(self, f"block_{i}") for i in range(self.num_layers)]

    @property
    def relative_biases(self):
        """Each block's `RelativePositionBias`: its own, the stack's one table, or None (no relative positions)."""
        if self.relative_buckets and self.relative_bias_per_layer:
            return [getattr(self, f"relative_bias_{i}") for i in range(self.num_layers)]
        return [self.relative_bias] * self.num_layers

    def build_shared(self, input_shape):
        """Builds what the blocks do not hold: the final norm and the relative position table."""
        if self.final_norm is not None:
            self.final_norm.build(input_shape)
        for table in {id(table): table for table in self.relative_biases if table is not None}.values():
            table.build()

    def position_biases(self, query_length, key_length, query_start=0):
        """Each block's relative position bias `(1, heads, query_length, key_length)` (the stack's one table's
        computed once), or a None per block without relative positions."""
        if self.relative_buckets and self.relative_bias_per_layer:
            return [table.bias(query_length, key_length, query_start) for table in self.relative_biases]
        shared = None if self.relative_bias is None else self.relative_bias.bias(query_length, key_length, query_start)
        return [shared] * self.num_layers

    def _finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "block_config": self.block_config,
                       "relative_buckets": self.relative_buckets, "relative_max_distance": self.relative_max_distance,
                       "relative_bias_per_layer": self.relative_bias_per_layer})
        return config
