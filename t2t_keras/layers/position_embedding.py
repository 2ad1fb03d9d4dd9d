"""Learned positional embedding (Table 3, row E)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class LearnedPositionEmbedding(keras.layers.Layer):
    """Adds a trained embedding of each position, the alternative of Table 3 row (E).

    Args:
        max_length: number of positions that have an embedding; longer inputs
            are rejected by the model before they get here.
        initializer: initializer of the `(max_length, hidden_dim)` table.

    Call arguments:
        inputs: `(batch, length, hidden_dim)` embeddings.
        start_index: position of the first element (int or scalar tensor).

    Returns:
        `inputs` plus the embeddings of positions `start_index ... start_index + length - 1`.

    References:
        Vaswani et al., 2017, §3.5 and Table 3 (E); Gehring et al., 2017.
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if max_length <= 0:
            raise ValueError(f"max_length must be positive. Received: max_length={max_length}")
        self.max_length = max_length
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        table = ops.slice(self.embeddings, (start_index, 0), (length, inputs.shape[-1]))
        return inputs + ops.cast(table, inputs.dtype)[None, :, :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"max_length": self.max_length, "initializer": keras.initializers.serialize(self.initializer)}
        )
        return config
