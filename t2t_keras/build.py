"""The model a `config.ModelConfig` describes, whatever its `architecture`."""

import dataclasses

from t2t_keras.config import ENCODER_DECODER_SWITCHES
from t2t_keras.language_models import CausalLanguageModel, MaskedLanguageModel
from t2t_keras.model import build_transformer

SINGLE_STACK = {"decoder_only": CausalLanguageModel, "encoder_only": MaskedLanguageModel}


def build_model(model_config, dtype=None, name=None):
    """`Transformer`, `CausalLanguageModel` or `MaskedLanguageModel` for `model_config.architecture`, built; `dtype`:
    a Keras dtype policy name (training's mixed precision), None for that of `model_config.weights_dtype`.

    The single-stack models take the encoder-decoder's fields except
    `num_decoder_layers`; their output projection is tied to the embedding
    unless `tie_embeddings` is "none".
    """
    if model_config.architecture == "encoder_decoder":
        model = build_transformer(model_config, dtype=dtype, name=name or "transformer")
    else:
        arguments = dataclasses.asdict(model_config)
        # The encoder-decoder's own fields (the config refuses other values of ENCODER_DECODER_SWITCHES here).
        for field in ("architecture", "num_decoder_layers", "softmax", "adaptive_cutoffs", "special_ids",
                      "weights_dtype", *ENCODER_DECODER_SWITCHES):
            arguments.pop(field)
        arguments["pad_id"] = model_config.special_ids.pad
        arguments["tie_embeddings"] = arguments["tie_embeddings"] != "none"
        cls = SINGLE_STACK[model_config.architecture]
        model = cls(**arguments, dtype=model_config.dtype_policy_name if dtype is None else dtype,
                    name=name or model_config.architecture)
    model.build()
    return model
