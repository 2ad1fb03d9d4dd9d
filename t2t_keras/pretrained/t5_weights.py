"""A T5-family checkpoint's tensors and the weights of our `Transformer` (`weights.Assignment`s).

Hugging Face's names: `shared.weight` (both stacks' embedding), `{encoder,decoder}.block.N.layer.M.` with, in
order, `SelfAttention.{q,k,v,o}` and `layer_norm` (M = 0), the decoder's `EncDecAttention.{q,k,v,o}` and
`layer_norm` (M = 1), and `DenseReluDense.{wi,wo}` (v1.0) or `{wi_0,wi_1,wo}` (gated) with `layer_norm`;
`block.0.layer.0.SelfAttention.relative_attention_bias.weight` (num_buckets, heads), the stack's one table (umT5:
`block.N.layer.0...` in every block, the layer's own);
`{encoder,decoder}.final_layer_norm.weight`; `lm_head.weight` when untied. PyTorch's `Linear` stores `(out, in)`.
"""

from t2t_keras.pretrained.weights import Assignment

T5_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
ATTENTION = {"q": "query_dense", "k": "key_dense", "v": "value_dense", "o": "output_dense"}


def _linear(dense, name, into_stream=False):
    return Assignment(dense.kernel, name, True, (1,) if into_stream else (0,))


def _norm(norm, name):
    return Assignment(norm.scale, name, False, (0,))


def _attention(attention, prefix):
    return [_linear(getattr(attention, ours), f"{prefix}.{theirs}.weight", theirs == "o")
            for theirs, ours in ATTENTION.items()]


def _block(block, prefix, decoder):
    """The assignments of one encoder or decoder block."""
    layer = f"{prefix}.layer"
    found = _attention(block.self_attention, f"{layer}.0.SelfAttention")
    found.append(_norm(block.self_attention_connection.layer_norm, f"{layer}.0.layer_norm.weight"))
    if decoder:
        found += _attention(block.cross_attention, f"{layer}.1.EncDecAttention")
        found.append(_norm(block.cross_attention_connection.layer_norm, f"{layer}.1.layer_norm.weight"))
    ff, index = block.feed_forward, 2 if decoder else 1
    dense = f"{layer}.{index}.DenseReluDense"
    if ff.gate is not None:
        found += [_linear(ff.inner, f"{dense}.wi_0.weight"), _linear(ff.gate, f"{dense}.wi_1.weight")]
    else:
        found.append(_linear(ff.inner, f"{dense}.wi.weight"))
    found.append(_linear(ff.outer, f"{dense}.wo.weight", into_stream=True))
    return found + [_norm(block.feed_forward_connection.layer_norm, f"{layer}.{index}.layer_norm.weight")]


def t5_assignments(model):
    """The `Assignment` of every weight of `model` (built with the switches `t5.convert` sets)."""
    found = [Assignment(model.target_embedding.embeddings, "shared.weight", False, (1,))]
    if model.source_embedding is not model.target_embedding:
        found.append(Assignment(model.source_embedding.embeddings, "shared.weight", False, (1,)))
    if model.output_projection is not None:
        found.append(Assignment(model.output_projection.kernel, "lm_head.weight", True, (0,)))
    for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for index, block in enumerate(stack.blocks):
            found += _block(block, f"{name}.block.{index}", name == "decoder")
        tables = stack.relative_biases if stack.relative_bias_per_layer else [stack.relative_bias]
        found += [Assignment(table.embeddings, f"{name}.block.{index}.layer.0.SelfAttention.relative_attention_bias"
                             ".weight", False, ()) for index, table in enumerate(tables)]
        found.append(_norm(stack.final_norm, f"{name}.final_layer_norm.weight"))
    return found
