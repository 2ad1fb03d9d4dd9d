"""The architecture's choices and consistency checks, shared by the config, the model and its layers.

Each check raises `ConfigError` (a `ValueError`) with a message that names the
values received and how to fix them; `prefix` names the config section when
the values come from a config file.
"""

from t2t_keras.errors import ConfigError

# The encoder-decoder of the paper, and the two single-stack models built from its layers
# (GPT-style causal language model, BERT-style masked language model).
ARCHITECTURE_CHOICES = ("encoder_decoder", "decoder_only", "encoder_only")
TIE_CHOICES = ("all", "target", "none")  # §3.4 shares one matrix between both embeddings and the projection
SOFTMAX_CHOICES = ("full", "adaptive")  # adaptive: Grave et al., 2017 (layers.AdaptiveSoftmax)
# §3.5, Table 3 row (E), and T5's learned bias of bucketed relative positions (Raffel et al., 2020), which adds
# nothing to the embeddings (layers.RelativePositionBias)
POSITION_CHOICES = ("sinusoidal", "learned", "relative")
NORMALIZATION_CHOICES = ("layer", "rms")  # LayerNorm (§3.1), or T5's RMS normalisation (layers.RMSNormalization)
# The sinusoid's layout (layers.SinusoidalPositionEncoding): §3.5's interleaved sin/cos; Marian's [sin..., cos...]
# with the same frequencies; fairseq's [sin..., cos...] with frequencies 10000^(-i / (d/2 - 1)).
SINUSOID_CHOICES = ("interleaved", "split", "fairseq")
# the feed-forward nonlinearity (§3.3: relu); Keras' names, and "gelu_tanh", GELU's tanh approximation (T5's gelu_new)
ACTIVATION_CHOICES = ("relu", "gelu", "swish", "gelu_tanh")


def check_choice(name, value, choices, prefix=""):
    """Raises `ConfigError` unless `value` is one of `choices`."""
    if value not in choices:
        raise ConfigError(f"{prefix}{name} must be one of {list(choices)}. Received: {name}={value!r}")


def head_dims(hidden_dim, num_heads, key_dim=None, value_dim=None, prefix=""):
    """`(key_dim, value_dim)` of each head: d_k = d_v = d_model / h unless given (§3.2.2)."""
    if key_dim is None and hidden_dim % num_heads:
        raise ConfigError(
            f"{prefix}hidden_dim={hidden_dim} is not divisible by {prefix}num_heads={num_heads}: "
            f"set hidden_dim to a multiple of num_heads, or set {prefix}key_dim and {prefix}value_dim explicitly."
        )
    key_dim = key_dim or hidden_dim // num_heads
    return key_dim, value_dim or key_dim


def check_softmax(softmax, tie_embeddings, prefix=""):
    """The adaptive softmax cannot be the transposed embedding: its tail clusters have fewer dimensions."""
    check_choice("softmax", softmax, SOFTMAX_CHOICES, prefix)
    if softmax == "adaptive" and tie_embeddings == "target":
        raise ConfigError(
            f"{prefix}tie_embeddings='target' ties the target embedding to the output layer, but the adaptive "
            "softmax's tail clusters project to fewer than d_model dimensions, so no (vocab x d_model) matrix "
            f"can serve both. Use {prefix}tie_embeddings='all' (source and target embeddings shared) or 'none'."
        )


def check_tied_vocabularies(tie_embeddings, vocab_size, source_vocab_size, prefix=""):
    """One shared matrix needs one vocabulary."""
    if tie_embeddings == "all" and source_vocab_size not in (None, vocab_size):
        raise ConfigError(
            f"{prefix}tie_embeddings='all' shares one vocabulary, but {prefix}source_vocab_size "
            f"({source_vocab_size}) != vocab_size ({vocab_size}). Use tie_embeddings='target' or one vocabulary."
        )


def check_position_switches(position_encoding, position_sinusoid, position_offset, hidden_dim, prefix=""):
    """The sinusoid's layout and offset describe the sinusoidal encoding, whose fairseq layout needs d_model >= 4."""
    check_choice("position_sinusoid", position_sinusoid, SINUSOID_CHOICES, prefix)
    if isinstance(position_offset, bool) or not isinstance(position_offset, int) or position_offset < 0:
        raise ConfigError(f"{prefix}position_offset must be an integer >= 0. Received: position_offset="
                          f"{position_offset!r}")
    if position_encoding != "sinusoidal" and (position_sinusoid, position_offset) != ("interleaved", 0):
        raise ConfigError(
            f"{prefix}position_sinusoid and {prefix}position_offset describe the sinusoidal encoding, but "
            f"{prefix}position_encoding={position_encoding!r}: set position_encoding=sinusoidal, or leave "
            "position_sinusoid=interleaved and position_offset=0."
        )
    if position_sinusoid == "fairseq" and hidden_dim < 4:
        raise ConfigError(f"{prefix}position_sinusoid='fairseq' divides by d_model / 2 - 1, so it needs "
                          f"{prefix}hidden_dim >= 4. Received: hidden_dim={hidden_dim}")


def check_per_layer_bias(position_encoding, relative_bias_per_layer, prefix=""):
    """umT5's table in every layer is a choice of the relative position bias, which only relative positions have."""
    if not isinstance(relative_bias_per_layer, bool):
        raise ConfigError(f"{prefix}relative_bias_per_layer must be true or false. Received: "
                          f"relative_bias_per_layer={relative_bias_per_layer!r}")
    if relative_bias_per_layer and position_encoding != "relative":
        raise ConfigError(f"{prefix}relative_bias_per_layer gives each layer's self-attention a relative position "
                          f"table, but {prefix}position_encoding={position_encoding!r}: set position_encoding="
                          "relative, or relative_bias_per_layer=false.")


def check_relative_switches(relative_buckets, relative_max_distance, prefix=""):
    """T5's bucketed relative positions: half the buckets exact, the rest logarithmic up to the largest distance."""
    for name, value in (("relative_buckets", relative_buckets), ("relative_max_distance", relative_max_distance)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 4:
            raise ConfigError(f"{prefix}{name} must be an integer >= 4 (T5: 32 and 128). Received: {name}={value!r}")
    if relative_max_distance <= relative_buckets // 2:
        raise ConfigError(f"{prefix}relative_max_distance ({relative_max_distance}) must exceed the exact buckets, "
                          f"relative_buckets / 2 ({relative_buckets // 2}): raise relative_max_distance.")
