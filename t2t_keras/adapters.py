"""Low-rank adapters (LoRA, Hu et al., 2021) on the attention and feed-forward projections, and their merge.

Every projection of multi-head attention (W^Q, W^K, W^V, W^O) and of the feed-forward network (W1, W2) is a Keras
`Dense` layer, and `Dense.enable_lora(rank)` gives it an adapter: the layer computes `x (W + (alpha / rank) A B)`
with `A` of shape `(input_dim, rank)` (He-uniform) and `B` of shape `(rank, output_dim)` (zeros, so an adapted model
starts out computing exactly what its base does). `alpha` is Keras' default, the rank, so the scale is 1.

`add_adapters` freezes everything else: the base kernels and biases, the embeddings, LayerNorm scales and offsets
and any output layer. Only the adapters are trainable, and the optimizer's moments exist for them alone.

`merged_into(adapted, plain)` writes `W + (alpha / rank) A B` into the kernels of a model of the same config built
without adapters: what exports and decoding use, a model with no adapter variables that computes the same function.

    model = build_model(config.model); add_adapters(model, rank=8)     # train it; checkpoints hold A and B
    plain = merged_into(model, build_model(config.model))              # export / decode this one

References:
    Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models", §4.1.
"""

import numpy as np

from t2t_keras.keras_compat import base_kernel, sublayers
from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.multi_head_attention import MultiHeadAttention

ADAPTER_NAMES = ("lora_kernel_a", "lora_kernel_b")  # the variables `Dense.enable_lora` adds


def projections(model):
    """The `Dense` layers adapters go on: the four projections of every attention and the two of every FFN."""
    found = []
    for layer in sublayers(model):
        if isinstance(layer, MultiHeadAttention):
            found += [layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense]
        elif isinstance(layer, FeedForward):
            found += [layer.inner, layer.outer]
    return found


def is_adapter(variable):
    return variable.path.rsplit("/", 1)[-1] in ADAPTER_NAMES


def add_adapters(model, rank):
    """Adds rank-`rank` adapters to `model`'s projections (a built model) and freezes every other weight.

    Returns `model`. Its `trainable_variables` are then the adapters alone.
    """
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise ValueError(f"rank must be a positive integer. Received: rank={rank!r}")
    layers = projections(model)
    smallest = min(min(layer.kernel.shape) for layer in layers)  # a larger rank adds weights, not rank
    if rank > smallest:
        raise ValueError(f"rank must be at most {smallest}, the smaller dimension of the smallest projection. "
                         f"Received: rank={rank}")
    for layer in layers:
        layer.enable_lora(rank)
    for variable in model.trainable_variables:
        if not is_adapter(variable):
            variable.trainable = False
    return model


def has_adapters(model):
    return any(layer.lora_enabled for layer in projections(model))


def merged_weights(model):
    """`model`'s weights without its adapters, each adapted kernel replaced by `W + (alpha / rank) A B`.

    They come in the order of the weights of the same model built without adapters (`set_weights` takes them).
    """
    merged = {id(base_kernel(layer)): np.asarray(layer.kernel) for layer in projections(model) if layer.lora_enabled}
    return [merged.get(id(variable), np.asarray(variable)) for variable in model.weights if not is_adapter(variable)]


def merged_into(adapted, plain):
    """`plain` (the same config, built without adapters) holding `adapted`'s merged weights; returns `plain`."""
    plain.set_weights(merged_weights(adapted))
    return plain


def adapter_parameters(model):
    """The number of adapter weights in `model`."""
    return sum(int(np.prod(variable.shape)) for variable in model.weights if is_adapter(variable))
