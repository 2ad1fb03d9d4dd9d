"""A BART-style checkpoint's tensors (Marian, M2M-100, NLLB) and the weights of our `Transformer`, both ways.

Both families name their layers alike: `model.{encoder,decoder}.layers.N.` then
`self_attn.{q,k,v,out}_proj`, `encoder_attn.*` (decoder only), `fc1`, `fc2` and a
LayerNorm after (Marian) or before (M2M-100) each: `self_attn_layer_norm`,
`encoder_attn_layer_norm`, `final_layer_norm`; M2M-100 adds one LayerNorm per stack
(`model.encoder.layer_norm`). PyTorch's `Linear` stores `(out, in)`: our kernels are
its transpose. `assignments` is the one mapping: the import sets each variable from
its tensor (`set_weights`, where every tensor must find its variable and every
variable its tensor, with the shape config.json implies; anything else is refused,
naming the tensor), and `export --format marian` writes each tensor from its
variable (`tensors_of`).

Each assignment also names the axes of the variable that run along d_model, the
residual stream's dimension: a permutation of that dimension applied to exactly
those axes (the embeddings' columns, the input rows of every projection out of the
stream, the output columns and biases of every projection into it, the LayerNorms'
scales and offsets) gives a model that computes the same logits on permuted
hidden states (`tensors_of(..., permutation)`).
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from t2t_keras.pretrained.checkpoint import CheckpointError, renamed, row_blocks, tensor_shape, whole_tensor


class Assignment(NamedTuple):
    """One variable of the model and the checkpoint's tensor of it."""

    variable: object
    name: str  # the tensor's name in the checkpoint
    transposed: bool  # the tensor is the variable's transpose (PyTorch's Linear)
    residual_axes: tuple  # the variable's axes along d_model (see the module docstring)


class EmbeddingNames(NamedTuple):
    """The checkpoint's tensors of the embeddings and the output layer."""

    source: str  # the source embedding (when it is not the target's)
    target: str  # the target embedding (the tied output projection)
    output: str = "lm_head.weight"  # an untied output projection
    logits_bias: str = "final_logits_bias"


ATTENTION = {"q_proj": "query_dense", "k_proj": "key_dense", "v_proj": "value_dense", "out_proj": "output_dense"}


def _dense(dense, prefix, into_stream=False):
    """The `Assignment`s of one projection: out of the residual stream (its input rows along d_model), or
    `into_stream` (its output columns and its bias)."""
    return [Assignment(dense.kernel, prefix + "weight", True, (1,) if into_stream else (0,)),
            Assignment(dense.bias, prefix + "bias", False, (0,) if into_stream else ())]


def _norm(norm, prefix):
    return [Assignment(norm.gamma, prefix + "weight", False, (0,)), Assignment(norm.beta, prefix + "bias", False, (0,))]


def _block(block, prefix, cross):
    """The assignments of one encoder or decoder block."""
    pairs = [("self_attn", block.self_attention, block.self_attention_connection)]
    if cross:
        pairs.append(("encoder_attn", block.cross_attention, block.cross_attention_connection))
    found = []
    for name, attention, connection in pairs:
        for theirs, ours in ATTENTION.items():
            found += _dense(getattr(attention, ours), f"{prefix}{name}.{theirs}.", into_stream=theirs == "out_proj")
        found += _norm(connection.layer_norm, f"{prefix}{name}_layer_norm.")
    found += _dense(block.feed_forward.inner, prefix + "fc1.")
    found += _dense(block.feed_forward.outer, prefix + "fc2.", into_stream=True)
    return found + _norm(block.feed_forward_connection.layer_norm, prefix + "final_layer_norm.")


def assignments(model, embeddings):
    """The `Assignment` of every weight of `model`; `embeddings` names the tensors of the source and target
    embeddings, the untied output projection and the logits bias (`EmbeddingNames`)."""
    found = [Assignment(model.target_embedding.embeddings, embeddings.target, False, (1,))]
    if model.source_embedding is not model.target_embedding:
        found.append(Assignment(model.source_embedding.embeddings, embeddings.source, False, (1,)))
    if model.output_projection is not None:
        found.append(Assignment(model.output_projection.kernel, embeddings.output, True, (0,)))
    if model.logits_bias is not None:
        found.append(Assignment(model.logits_bias.bias, embeddings.logits_bias, False, ()))
    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for index, block in enumerate(stack.blocks):
            found += _block(block, f"model.{stack_name}.layers.{index}.", stack_name == "decoder")
        if stack.final_norm is not None:
            found += _norm(stack.final_norm, f"model.{stack_name}.layer_norm.")
    return found


def set_weights(model, tensors, embeddings, ignored=(), planned=None):
    """Assigns `tensors` (`{name: float32 array}`, or a `checkpoint.SafetensorsTensors`) to `model` (built);
    `ignored`: names read elsewhere or left out on purpose (an alias of a tied matrix, a stored position table that
    was checked). `planned`: the `Assignment`s of another family's layout (T5's), instead of the BART-style
    `assignments`. Each tensor is read when it is assigned, a large one a block of rows at a time (`_assign`)."""
    if planned is None:
        if not any(name.startswith("model.") for name in tensors):  # a base model's, saved without "model."
            tensors = renamed(tensors, "model.")
        planned = assignments(model, embeddings)
    missing = sorted({entry.name for entry in planned if entry.name not in tensors})
    if missing:
        raise CheckpointError(f"The checkpoint's weights lack {missing[:4]}{' ...' if len(missing) > 4 else ''}, "
                              "which its config.json implies: the weights and config.json do not belong together; "
                              "download both again.")
    unused = sorted(set(tensors) - {entry.name for entry in planned} - set(ignored))
    if unused:
        raise CheckpointError(f"The checkpoint has weights t2t_keras has no place for: {unused[:4]}"
                              f"{' ...' if len(unused) > 4 else ''}. Its model differs from the one config.json "
                              "describes to us (a switch the import does not know): it is not imported.")
    for entry in planned:  # every shape first: a refused checkpoint changes nothing
        _check_shape(entry, tensor_shape(tensors, entry.name))
    for entry in planned:
        _assign(entry, tensors)


def _check_shape(entry, shape):
    """Refuses a tensor whose shape is not the variable's (its transpose for PyTorch's Linear; any shape of as many
    values for a vector)."""
    expected = tuple(entry.variable.shape)
    found = (int(np.prod(shape)),) if len(expected) == 1 else tuple(reversed(shape)) if entry.transposed else shape
    if found != expected:
        raise CheckpointError(f"The checkpoint's {entry.name} has shape {shape}, but config.json implies "
                              f"{tuple(reversed(expected)) if entry.transposed else expected}: the weights and "
                              "config.json do not belong together; download both again.")


def _assign(entry, tensors):
    """Sets `entry.variable` from its tensor, read in the variable's dtype (bfloat16 values kept as stored, float32
    ones rounded, for a model of bfloat16 weights): whole, or a block of the tensor's rows at a time into the
    variable's rows (its columns when transposed), so that only one block is held besides the variable."""
    variable = entry.variable
    dtype = tf.as_dtype(variable.dtype).as_numpy_dtype
    if len(variable.shape) == 1:
        variable.assign(whole_tensor(tensors, entry.name, dtype).reshape(-1))
        return
    for start, rows in row_blocks(tensors, entry.name, dtype=dtype):
        if start == 0 and len(rows) == variable.shape[1 if entry.transposed else 0]:  # the whole tensor
            variable.assign(rows.T if entry.transposed else rows)
        else:
            _assign_block(variable, start, rows, entry.transposed)


def _assign_block(variable, start, rows, transposed):
    """Writes `rows` into the variable's rows from `start` (its columns when `transposed`) in place. Not through
    `variable[...].assign`: that slice reads the variable first, and the write then copies the whole variable."""
    (height, width), stop = variable.shape, start + len(rows)
    begin, end, value = ([0, start], [height, stop], rows.T) if transposed else ([start, 0], [stop, width], rows)
    tf.raw_ops.ResourceStridedSliceAssign(ref=variable.value.handle, begin=begin, end=end, strides=[1, 1],
                                          value=value)


def tensors_of(model, embeddings, permutation=None, shapes=None):
    """`{name: float32 array}`: the checkpoint's tensors of `model`'s weights (`assignments`), each laid out as the
    checkpoint stores it. `permutation` (int array of d_model entries): new column j of the residual stream is old
    column `permutation[j]`, applied to every residual axis. `shapes`: `{name: shape}` for tensors stored with
    another shape than the variable's (Marian's logits bias is `(1, vocab)`)."""
    tensors = {}
    for variable, name, transposed, axes in assignments(model, embeddings):
        value = np.asarray(variable.numpy(), dtype=np.float32)
        for axis in axes if permutation is not None else ():
            value = np.take(value, permutation, axis=axis)
        value = value.T if transposed else value
        tensors[name] = np.ascontiguousarray(value.reshape((shapes or {}).get(name, value.shape)))
    return tensors
