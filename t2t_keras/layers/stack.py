"""What the encoder and decoder stacks share: N identical blocks and, for pre-LN, a final LayerNorm."""

import keras

from t2t_keras.layers.layer_normalization import LayerNormalization


class TransformerStack(keras.layers.Layer):
    """Base of `Encoder` and `Decoder` (§3.1): `num_layers` blocks of one kind.

    Args:
        num_layers: N.
        block_config: keyword arguments of each block (see `TransformerBlock`).
    """

    block_class = None  # set by subclasses

    def __init__(self, num_layers, block_config=None, **kwargs):
        super().__init__(**kwargs)
        if num_layers <= 0:
            raise ValueError(f"num_layers must be positive. Received: num_layers={num_layers}")
        self.num_layers = num_layers
        self.block_config = dict(block_config or {})
        # One attribute per block rather than a list: tf.train.Checkpoint does not
        # follow Keras' tracked lists, and checkpoints must hold every weight.
        for i in range(num_layers):
            setattr(self, f"block_{i}", self.block_class(**self.block_config, dtype=self.dtype_policy,
                                                          name=f"block_{i}"))
        # Pre-LN blocks leave their output un-normalised; the stack normalises once at the end.
        self.normalize_first = self.block_config.get("normalize_first", False)
        self.final_norm = None
        if self.normalize_first:
            self.final_norm = LayerNormalization(
                epsilon=self.block_config.get("layer_norm_epsilon", 1e-6), dtype=self.dtype_policy,
                name="final_norm",
            )

    @property
    def blocks(self):
        return [getattr(self, f"block_{i}") for i in range(self.num_layers)]

    def _finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "block_config": self.block_config})
        return config
