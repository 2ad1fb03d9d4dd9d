"""The model's projections: Keras' `Dense`, with inputs of rank > 2 multiplied as one matrix product."""

import keras
from keras import ops

from t2t_keras.layers.shapes import reshape_trailing, rows


def project(inputs, kernel):
    """`inputs` `(..., in)` times `kernel` `(in, out)`: `(..., out)`, as one `(rows, in) x (in, out)` product.

    The same arithmetic as `ops.matmul(inputs, kernel)`: the same kernel on the same numbers, so the same
    results. On TensorFlow `ops.matmul` multiplies rank > 2 inputs with `tf.tensordot`, whose shape
    bookkeeping (gathers, products, concatenations, transposes and their constants) takes about 30 graph ops
    per call where a reshape, a MatMul and a reshape take a handful: every trace of a forward pass, a
    training step, a search or an export builds, optimizes and stores fewer ops (with `layers.shapes`, `mini`: 20-23%
    fewer in the forward pass and a greedy search, 11% in a training step; bench/results/graph_size.md).
    """
    if len(inputs.shape) <= 2:
        return ops.matmul(inputs, kernel)
    input_dim, units = kernel.shape
    product = ops.matmul(rows(inputs, input_dim), kernel)  # (rows, units)
    return reshape_trailing(product, 1, (units,), like=inputs)


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` whose float computation multiplies with `project`; everything else is Keras'.

    Weights, LoRA adapters (`enable_lora`: `self.kernel` is the merged kernel), int8 quantization (Keras
    calls its own quantized kernels for a quantized layer, never this `call`), activation and serialization
    are those of `keras.layers.Dense`, so checkpoints and `.keras` files are unchanged.

    Call arguments:
        inputs: `(..., input_dim)`.

    Returns:
        `(..., units)`.
    """

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' Dense refuses to quantize a subclass (`type_check`) unless it says it quantizes as Dense does: this
        # one does, as only its float `call` differs.
        super().quantize(mode, type_check=False, config=config)

    def call(self, inputs, training=None):
        outputs = project(inputs, self.kernel)
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs
