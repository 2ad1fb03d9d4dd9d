"""What Marian's and M2M-100's config.json share (both are BART-style encoder-decoders): reading a key, refusing
a value the model cannot represent, the sizes, the activation and the generation defaults."""

import dataclasses

from t2t_keras.pretrained.checkpoint import CONFIG, CheckpointError

# Hugging Face's activation_function -> model.activation (Keras' names; "gelu" is the exact, erf-based one in both)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
# Layer drop skips whole layers at random in training only: the model's outputs do not depend on it.
TRAINING_ONLY = ("encoder_layerdrop", "decoder_layerdrop")
# What generation_config.json (or config.json) says about decoding, recorded in the run for the searches.
GENERATION_KEYS = ("num_beams", "max_length", "max_new_tokens", "length_penalty", "bad_words_ids",
                   "forced_bos_token_id", "forced_eos_token_id", "early_stopping", "no_repeat_ngram_size",
                   "encoder_no_repeat_ngram_size", "repetition_penalty", "min_length", "min_new_tokens")
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which both models use
# config.json switches Hugging Face's models read or ignore, which would make another model than ours: per family,
# the value it must have (when present), and what another value builds.
SWITCHES = {
    "add_bias_logits": {"marian": False, "m2m100": False, "why": "a bias inside the output projection (besides "
                                                                 "final_logits_bias)"},
    "normalize_embedding": {"marian": False, "m2m100": False, "why": "a LayerNorm on the embeddings (mBART-style)"},
    "layernorm_embedding": {"m2m100": False, "why": "a LayerNorm on the embeddings (mBART-style)"},
    "static_position_embeddings": {"marian": True, "why": "learned position embeddings instead of sinusoids"},
    "normalize_before": {"marian": False, "m2m100": True, "why": "blocks normalised where Hugging Face's model for "
                                                                 "this family does not build them"},
    "add_final_layer_norm": {"marian": False, "why": "a final LayerNorm per stack, which Hugging Face's "
                                                     "MarianMTModel does not build"},
}


def value(config, key, default=None, required=False):
    """`config[key]`, or `default`; a `CheckpointError` naming the key when it is required and absent."""
    if key not in config or config[key] is None:
        if required:
            raise CheckpointError(f"{CONFIG} has no {key!r}, which the import needs: download the checkpoint's "
                                  f"{CONFIG} again.")
        return default
    return config[key]


def refuse(key, received, why, fix="import a checkpoint without it"):
    """The error for a config.json setting the model cannot represent, naming the key."""
    return CheckpointError(f"{CONFIG} sets {key}={received!r}: {why}; t2t_keras cannot represent that model "
                           f"exactly, so it is not imported. Fix: {fix}.")


def check_switches(config, family):
    """Refuses each of `SWITCHES` whose config.json value (when the key is present) is not the one `family` needs."""
    for key, wanted in SWITCHES.items():
        if family in wanted and key in config and config[key] is not None and config[key] != wanted[family]:
            raise refuse(key, config[key], wanted["why"])


def one_id(config, key, required=True):
    """A token id of config.json; a list of one id (eos_token_id may be a list) is that id."""
    found = value(config, key, required=required)
    if isinstance(found, list) and len(found) == 1:
        found = found[0]
    if found is not None and (isinstance(found, bool) or not isinstance(found, int) or found < 0):
        raise refuse(key, found, "t2t_keras models have one id for each special token")
    return found


def stack_sizes(config):
    """The model section's sizes from the encoder's and decoder's keys, which must agree where we have one value."""
    for encoder, decoder in (("encoder_attention_heads", "decoder_attention_heads"),
                             ("encoder_ffn_dim", "decoder_ffn_dim"), ("encoder_d_model", "decoder_d_model")):
        if value(config, encoder) != value(config, decoder):
            raise refuse(decoder, value(config, decoder), f"it differs from {encoder}={value(config, encoder)!r}, "
                         "and the model has one value for both stacks")
    hidden = value(config, "d_model", required=True)
    if value(config, "encoder_d_model", hidden) != hidden:
        raise refuse("encoder_d_model", config["encoder_d_model"], f"it differs from d_model={hidden}")
    activation = value(config, "activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise refuse("activation_function", activation, f"the feed-forward activations are {sorted(ACTIVATIONS)}")
    if not value(config, "is_encoder_decoder", True):
        raise refuse("is_encoder_decoder", False, "only the encoder-decoder translation model is imported")
    return {"hidden_dim": hidden, "num_layers": value(config, "encoder_layers", required=True),
            "num_decoder_layers": value(config, "decoder_layers", required=True),
            "num_heads": value(config, "encoder_attention_heads", required=True),
            "intermediate_dim": value(config, "encoder_ffn_dim", required=True),
            "activation": ACTIVATIONS[activation], "dropout": float(value(config, "dropout", 0.0)),
            "attention_dropout": float(value(config, "attention_dropout", 0.0)),
            "activation_dropout": float(value(config, "activation_dropout", 0.0)),
            "max_length": value(config, "max_position_embeddings", 1024),
            "layer_norm_epsilon": LAYER_NORM_EPSILON}


def ignored_settings(config):
    """The training-only settings config.json sets that the model has no place for, for the provenance."""
    return {key: config[key] for key in TRAINING_ONLY if value(config, key, 0)}


def generation_defaults(checkpoint):
    """The decoding defaults of generation_config.json where the checkpoint has one, else of config.json."""
    source = checkpoint.optional_json("generation_config.json") or checkpoint.config
    return {key: source[key] for key in GENERATION_KEYS if source.get(key) is not None}


@dataclasses.dataclass(frozen=True)
class Imported:
    """What a family's conversion makes of a checkpoint, before its weights are read."""

    family: str  # "marian" or "m2m100"
    model: dict  # the model section (config.ModelConfig's fields)
    tokenizer: dict  # the tokenizer archive's files, manifest included (data.pretrained_tokenizer)
    embeddings: object  # weights.EmbeddingNames
    aliases: tuple = ()  # tensors that repeat a tied matrix or a fixed table: not weights of their own
    languages: tuple = ()  # (source, target) language of the run, for a multilingual model
    position_tables: tuple = ()  # stored sinusoid tables to check against the model's (older Marian checkpoints)
    generation: dict = dataclasses.field(default_factory=dict)  # decoding settings the run implies (NLLB's forced bos)
    weight_map: object = None  # model -> its weights.Assignment list, for a layout other than BART's (T5's)


def check_model_type(config, model_type, family):
    """Refuses a config.json of another model type, naming the --from that imports it where there is one."""
    found = config.get("model_type")
    if found != model_type:
        other = {"marian": "marian", "m2m_100": "m2m100", "t5": "t5", "mt5": "t5", "umt5": "t5"}.get(found)
        hint = f"import it with --from {other}" if other else \
            "only Marian (OPUS-MT), M2M-100 / NLLB and T5 / mT5 / umT5 / MADLAD-400 are imported"
        raise CheckpointError(f"{CONFIG} sets model_type={found!r}, but --from {family} imports model_type "
                              f"{model_type!r}: {hint}.")
