"""int8 weights for the SavedModel: Keras' own weight quantization of every Dense layer.

`Model.quantize("int8")` stores each `Dense` kernel as int8 with one float32
scale per output unit and quantizes the activations on the fly. In the
Transformer that covers the attention projections (query, key, value and
output of every `MultiHeadAttention`: plain Dense layers), both feed-forward
layers and an untied output projection. The tied `TokenEmbedding` (shared by
the embeddings and the pre-softmax projection) has no `quantize` method and
stays float32, as do LayerNorm and the positions.

It is off by default: whether it is faster than float32 depends on the CPU's
int8 kernels; see `bench/bench_deployment.py` and `docs/results.md`.
"""

import warnings

from t2t_keras.errors import T2TError

SAVED_MODEL_QUANTIZATIONS = (None, "int8")


def quantized_copy(model, mode="int8"):
    """A copy of the built `Transformer` `model` whose Dense layers hold int8 weights; `model` is unchanged."""
    from t2t_keras.model import Transformer

    if mode not in SAVED_MODEL_QUANTIZATIONS[1:]:
        raise T2TError(f"SavedModel quantization must be 'int8'. Received: {mode!r}")
    copy = Transformer.from_config(model.get_config())
    copy.build()
    copy.set_weights(model.get_weights())
    with warnings.catch_warnings():
        # Keras warns about every layer without weights to quantize (LayerNorm, Dropout, ...).
        warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
        copy.quantize(mode)
    return copy
