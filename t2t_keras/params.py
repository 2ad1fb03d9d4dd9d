"""Closed-form parameter and FLOP counts of a `ModelConfig`.

Accounting: every projection weight and bias, LayerNorm scale and offset,
the embedding matrices (one when shared three ways, §3.4), learned position
tables; sinusoids have no parameters.
"""


def attention_params(model_dim, key_dim, value_dim, num_heads, bias=True):
    """Q, K (d_model x h*d_k), V (d_model x h*d_v) and output (h*d_v x d_model), with biases unless `bias` is
    False (T5)."""
    query_key = 2 * (model_dim * num_heads * key_dim + bias * num_heads * key_dim)
    value = model_dim * num_heads * value_dim + bias * num_heads * value_dim
    output = num_heads * value_dim * model_dim + bias * model_dim
    return query_key + value + output


def feed_forward_params(model_dim, intermediate_dim, bias=True, gated=False):
    """W1 (and a gate of its size, `gated`) and W2, with biases unless `bias` is False."""
    inner = (2 if gated else 1) * (model_dim * intermediate_dim + bias * intermediate_dim)
    return inner + model_dim * intermediate_dim + bias * model_dim


def adaptive_softmax_params(model_dim, vocab_size, cutoffs, tail_factor=4):
    """Head (shortlist + one entry per cluster) and, per tail cluster, its projection and output."""
    bounds = list(cutoffs) + [vocab_size]
    total = model_dim * (bounds[0] + len(cutoffs))
    for i, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        width = max(1, model_dim // tail_factor ** (i + 1))
        total += model_dim * width + width * (end - start)
    return total


def relative_table_params(model_config, layers):
    """T5's relative position tables of a stack of `layers`: one for the stack, or one per layer (umT5)."""
    c = model_config
    if c.position_encoding != "relative":
        return 0
    return c.relative_buckets * c.num_heads * (layers if c.relative_bias_per_layer else 1)


def count_parameters(model_config):
    """Parameter counts by part, and `total`, for a `ModelConfig` of any `architecture`."""
    c = model_config
    d = c.hidden_dim
    attention = attention_params(d, c.head_key_dim, c.head_value_dim, c.num_heads, c.use_bias)
    feed_forward = feed_forward_params(d, c.intermediate_dim, c.use_bias, c.gated_feed_forward)
    norm = d if c.normalization == "rms" else 2 * d  # RMS normalisation has a scale and no offset
    final_norm = norm if c.normalize_first else 0  # pre-LN's final norm, once per stack
    self_attention_stack = (c.num_layers * (attention + feed_forward + 2 * norm) + final_norm
                            + relative_table_params(c, c.num_layers))
    positions = c.max_length * d if c.position_encoding == "learned" else 0
    if c.architecture == "encoder_decoder":
        counts = {
            "encoder": self_attention_stack,
            "decoder": (c.decoder_layers * (2 * attention + feed_forward + 3 * norm) + final_norm
                        + relative_table_params(c, c.decoder_layers)),
            # target embedding, a source embedding unless tied to it (of its own vocabulary), an untied projection
            "embeddings": d * (c.vocab_size + (0 if c.tie_embeddings == "all" else c.source_vocab_size or c.vocab_size)
                               + (c.vocab_size if c.tie_embeddings == "none" else 0)),
            "positions": 2 * positions,
        }
        if c.final_logits_bias:
            counts["logits_bias"] = c.vocab_size
        if c.softmax == "adaptive":  # its own output layer instead of the tied or separate projection
            counts["embeddings"] -= c.vocab_size * d if c.tie_embeddings == "none" else 0
            counts["adaptive_softmax"] = adaptive_softmax_params(d, c.vocab_size, c.adaptive_cutoffs or [])
    else:
        stack = "decoder" if c.architecture == "decoder_only" else "encoder"
        counts = {
            stack: self_attention_stack,
            "embeddings": c.vocab_size * d * (2 if c.tie_embeddings == "none" else 1),
            "positions": positions,
        }
        if c.architecture == "encoder_only":
            counts["heads"] = (d * d + d + norm) + (d * d + d)  # masked-LM transform + LayerNorm, pooler
    counts["total"] = sum(counts.values())
    return counts


def adapter_parameters(model_config, rank):
    """Weights of rank-`rank` adapters on every attention and feed-forward projection (t2t_keras/adapters.py).

    A projection `(n_in, n_out)` gets `A (n_in, rank)` and `B (rank, n_out)`: `rank · (n_in + n_out)` weights.
    """
    c = model_config
    d, hk, hv = c.hidden_dim, c.num_heads * c.head_key_dim, c.num_heads * c.head_value_dim
    attention = rank * ((d + hk) * 2 + (d + hv) * 2)  # Q and K; V and output
    feed_forward = rank * (d + c.intermediate_dim) * 2
    if c.architecture == "encoder_decoder":
        return c.num_layers * (attention + feed_forward) + c.decoder_layers * (2 * attention + feed_forward)
    return c.num_layers * (attention + feed_forward)


def training_flops_per_target_token(model_config, source_length=32, target_length=32):
    """Training FLOPs (3 x forward) per target (predicted) token, matmuls only.

    Same accounting as the peer benchmark harness: attention and FFN
    projections, the QK^T and AV products over full (unmasked) lengths and the
    output projection; embeddings, softmax, LayerNorm and loss are not counted.
    Single-stack models predict every position of one sequence of `target_length`.
    """
    c = model_config
    d, ratio = c.hidden_dim, source_length / target_length
    hk, hv = c.num_heads * c.head_key_dim, c.num_heads * c.head_value_dim
    self_projections = 2 * d * (2 * hk + 2 * hv)  # Q, K, V, output: 2 FLOPs per multiply-add
    ffn = 4 * d * c.intermediate_dim
    output = 2 * d * c.vocab_size
    if c.softmax == "adaptive":
        output = 2 * adaptive_softmax_params(d, c.vocab_size, c.adaptive_cutoffs or [])
    if c.architecture != "encoder_decoder":
        head = 2 * d * d if c.architecture == "encoder_only" else 0
        return 3 * (c.num_layers * (self_projections + ffn + 2 * target_length * (hk + hv)) + head + output)
    encoder = c.num_layers * (self_projections + ffn + 2 * source_length * (hk + hv))
    cross_query_out = 2 * d * (hk + hv)
    cross_key_value = 2 * d * (hk + hv)
    decoder = c.decoder_layers * (
        self_projections + ffn + 2 * target_length * (hk + hv)
        + cross_query_out + ratio * cross_key_value + 2 * source_length * (hk + hv)
    )
    forward = ratio * encoder + decoder + output
    return 3 * forward
