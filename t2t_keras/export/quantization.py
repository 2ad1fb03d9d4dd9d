"""int8 weights for the SavedModel: Keras' weight quantization of every Dense layer, and our tied embedding.

`Model.quantize("int8")` stores each `Dense` kernel as int8 with one float32
scale per output unit and quantizes the activations per row on the fly. In
the Transformer that covers the attention projections (query, key, value and
output of every `MultiHeadAttention` are plain Dense layers), both
feed-forward layers and an untied output projection. The target
`TokenEmbedding`, which Keras cannot quantize, is replaced by an
`Int8TokenEmbedding` (one scale per row): its lookups dequantize the row, and
when it is tied to the pre-softmax projection, the projection is an int8
matmul, as Keras' Dense does. LayerNorm, the positions and an untied source
embedding stay float32.

Whether it is faster than float32 depends on the model's size and the CPU's
int8 kernels (`bench/bench_deployment.py`): the fast path (`Decisions.quantization`,
switches/decisions.py) makes the choice of `export --quantization auto`, the command's default.
"""

import math
import warnings

import keras
from keras import ops

from t2t_keras.errors import T2TError
from t2t_keras.hardware import Hardware
from t2t_keras.keras_compat import one_garbage_collection, replace_layer
from t2t_keras.switches.decisions import INT8_AUTO_MIN_PARAMS, INT8_CPU_FLAGS, Decisions  # noqa: F401

SAVED_MODEL_QUANTIZATIONS = (None, "int8")


def choose_quantization(num_params, flags):
    """`(quantization, reason)` for `export --quantization auto` on a CPU with feature `flags`: "int8" where it
    measured faster, else None (the rule and its measurements: `Decisions.quantization`, switches/decisions.py;
    `export_run` asks the fast path of the exporting machine, which on a GPU or TPU keeps float32).

    Args:
        num_params: the model's parameter count.
        flags: the CPU's feature flags (`hardware.cpu_flags()`); int8 needs AMX (`INT8_CPU_FLAGS`).
    """
    return Decisions.of(Hardware(cpu_flags=frozenset(flags))).quantization(num_params)


@keras.saving.register_keras_serializable(package="t2t_keras")
class Int8TokenEmbedding(keras.layers.Layer):
    """`TokenEmbedding` (§3.4) with an int8 matrix and one float32 scale per token.

    Args:
        vocab_size: number of token ids.
        hidden_dim: d_model.

    Call arguments:
        token_ids: integer `(batch, length)`.

    Returns:
        `(batch, length, hidden_dim)` embeddings times sqrt(hidden_dim), as `TokenEmbedding`.
    """

    def __init__(self, vocab_size, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim

    def build(self, input_shape=None):
        shape = (self.vocab_size, self.hidden_dim)
        self.embeddings = self.add_weight(name="embeddings", shape=shape, dtype="int8", initializer="zeros",
                                          trainable=False)
        self.embeddings_scale = self.add_weight(name="embeddings_scale", shape=(self.vocab_size, 1),
                                                initializer="ones", trainable=False)

    def assign_float(self, embeddings):
        """Quantizes a float `(vocab_size, hidden_dim)` matrix into the layer: int8 rows and their scales."""
        if not self.built:
            self.build()
        quantized, scale = keras.quantizers.abs_max_quantize(embeddings, axis=-1, to_numpy=True)
        self.embeddings.assign(quantized)
        self.embeddings_scale.assign(scale)

    def call(self, token_ids):
        token_ids = ops.cast(token_ids, "int32")
        rows = ops.cast(ops.take(self.embeddings, token_ids, axis=0), self.compute_dtype)
        scales = ops.cast(ops.take(self.embeddings_scale, token_ids, axis=0), self.compute_dtype)
        return rows / scales * ops.cast(math.sqrt(self.hidden_dim), self.compute_dtype)

    def project(self, hidden, ids=None):
        """Pre-softmax projection as an int8 matmul: `(..., hidden_dim)` -> `(..., vocab_size)` logits, or
        `(..., S)` for the `(S,)` `ids` only (see `TokenEmbedding.project`)."""
        embeddings, embeddings_scale = self.embeddings, self.embeddings_scale
        if ids is not None:
            embeddings, embeddings_scale = ops.take(embeddings, ids, axis=0), ops.take(embeddings_scale, ids, axis=0)
        quantized, scale = keras.quantizers.abs_max_quantize(hidden, axis=-1)  # scale (..., 1)
        logits = ops.cast(ops.matmul(quantized, ops.transpose(embeddings)), hidden.dtype)  # int32 sums
        return logits / (ops.cast(scale, hidden.dtype) * ops.cast(ops.transpose(embeddings_scale), hidden.dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "hidden_dim": self.hidden_dim})
        return config


def quantized_copy(model, mode="int8"):
    """A copy of the built `Transformer` `model` with int8 Dense weights and target embedding; `model` is unchanged."""
    from t2t_keras.model import Transformer

    if mode not in SAVED_MODEL_QUANTIZATIONS[1:]:
        raise T2TError(f"SavedModel quantization must be 'int8'. Received: {mode!r}")
    copy = Transformer.from_config(model.get_config())
    copy.build()
    copy.set_weights(model.get_weights())
    with warnings.catch_warnings(), one_garbage_collection():
        # Keras warns about every layer without weights to quantize (LayerNorm, Dropout, ...).
        warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
        copy.quantize(mode)
    _replace_target_embedding(copy)
    return copy


def _replace_target_embedding(model):
    """Swaps the target `TokenEmbedding` (and the source one, when it is the same layer) for an int8 copy."""
    old = model.target_embedding
    new = Int8TokenEmbedding(old.vocab_size, old.hidden_dim, dtype=old.dtype_policy, name=old.name)
    new.assign_float(ops.convert_to_numpy(old.embeddings))
    tied_source = model.source_embedding is old
    # The float layer is untracked, so its weights are not saved.
    replace_layer(model, old, new, ["target_embedding"] + (["source_embedding"] if tied_source else []))
