"""The encoder stack (§3.1)."""

import keras

from t2t_keras.layers import masks
from t2t_keras.layers.encoder_block import EncoderBlock
from t2t_keras.layers.stack import TransformerStack


@keras.saving.register_keras_serializable(package="t2t_keras")
class Encoder(TransformerStack):
    """N `EncoderBlock`s. Arguments: see `TransformerStack`.

    Call arguments:
        inputs: embedded source `(batch, source_len, hidden_dim)`.
        padding_mask: boolean `(batch, source_len)`, True on real tokens.
        return_attention_scores: also return a list of per-layer weights.
        training: whether dropout is active.

    Returns:
        The `(batch, source_len, hidden_dim)` encoder output ("memory"), and the
        weights list if asked for.
    """

    block_class = EncoderBlock

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)
        if self.final_norm is not None:
            self.final_norm.build(input_shape)

    def call(self, inputs, padding_mask=None, return_attention_scores=False, training=None):
        mask = masks.attention_mask(key_padding=padding_mask)
        x, weights = inputs, []
        for block in self.blocks:
            x, layer_weights = block(x, attention_mask=mask, return_attention_scores=True, training=training)
            weights.append(layer_weights)
        x = self._finish(x)
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape
