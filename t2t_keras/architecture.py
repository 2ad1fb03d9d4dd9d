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
POSITION_CHOICES = ("sinusoidal", "learned")  # §3.5, and Table 3 row (E)


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


def check_tied_vocabularies(tie_embeddings, vocab_size, source_vocab_size):
    """One shared matrix needs one vocabulary."""
    if tie_embeddings == "all" and source_vocab_size not in (None, vocab_size):
        raise ConfigError(
            "tie_embeddings='all' shares one vocabulary, but source_vocab_size "
            f"({source_vocab_size}) != vocab_size ({vocab_size}). Use tie_embeddings='target' or one vocabulary."
        )
