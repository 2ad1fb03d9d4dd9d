"""The model a `config.ModelConfig` describes, whatever its `architecture`."""

import dataclasses

from t2t_keras.language_models import CausalLanguageModel, MaskedLanguageModel
from t2t_keras.model import build_transformer

SINGLE_STACK = {"decoder_only": CausalLanguageModel, "encoder_only": MaskedLanguageModel}


def build_model(model_config, dtype=None, name=None):
    """`Transformer`, `CausalLanguageModel` or `MaskedLanguageModel` for `model_config.architecture`, built.

    The single-stack models take the encoder-decoder's fields except
    `num_decoder_layers`; their output projection is tied to the embedding
    unless `tie_embeddings` is "none".
    """
    if model_config.architecture == "encoder_decoder":
        model = build_transformer(model_config, dtype=dtype, name=name or "transformer")
    else:
        arguments = dataclasses.asdict(model_config)
        for field in ("architecture", "num_decoder_layers", "softmax", "adaptive_cutoffs"):
            arguments.pop(field)
        arguments["tie_embeddings"] = arguments["tie_embeddings"] != "none"
        cls = SINGLE_STACK[model_config.architecture]
        model = cls(**arguments, dtype=dtype, name=name or model_config.architecture)
    model.build()
    return model
