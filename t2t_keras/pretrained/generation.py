"""A checkpoint's generation defaults (generation_config.json) as the imported run's `decoding` section.

`translate` on the run then decodes as transformers' `generate()` does with those defaults:

    num_beams           decoding.beam_size (transformers' default 1: greedy search)
    length_penalty      decoding.alpha, with decoding.length_penalty "power": log P(Y) / |Y|^alpha (default 1.0)
    early_stopping      decoding.stopping: False (the default) "transformers", True "transformers_early",
                        "never" "transformers_never" (`decoding.stopping`)
    max_new_tokens      decoding.max_output_length, the same count; else max_length - 1 (max_length counts the
                        decoder's start id); without either, transformers 5 generates 20 new tokens (fewer where
                        the model's max_position_embeddings is shorter); decoding.max_extra_length as large, so that
                        the source's length does not cut a translation earlier than generate() does
    forced_eos_token_id decoding.end_at_limit, when it is the model's end id
    bad_words_ids       [[pad]] (Marian's) is what every search does anyway: the padding id is never generated
    forced_bos_token_id the target language's code, which every search of a multilingual run forces

What the searches do not implement (another bad word, `no_repeat_ngram_size`, a `repetition_penalty`, a
`min_length`, an `forced_eos_token_id` that is not the end id) is listed in RUN/pretrained.json
(`generation_not_honoured`) and in a warning at import.
"""

import logging

from t2t_keras.config import DecodingConfig

logger = logging.getLogger(__name__)

# transformers' generate() defaults, where generation_config.json leaves a key out
DEFAULT_NEW_TOKENS = 20  # without max_length or max_new_tokens (transformers 5's _prepare_generated_length)
DEFAULT_LENGTH_PENALTY = 1.0
STOPPING = {False: "transformers", True: "transformers_early", "never": "transformers_never"}  # by early_stopping


def decoding_section(generation, special_ids, max_positions):
    """The run's `decoding` section (a dict) from the checkpoint's generation defaults, its `SpecialIds` and its
    `max_position_embeddings`."""
    beams = int(generation.get("num_beams") or 1)
    if generation.get("max_new_tokens") is not None:
        longest = int(generation["max_new_tokens"])
    elif generation.get("max_length") is not None:
        longest = int(generation["max_length"]) - 1
    else:
        longest = min(DEFAULT_NEW_TOKENS, max_positions - 1)
    longest = max(1, longest)
    penalty = generation.get("length_penalty")
    return {"beam_size": beams, "max_beam_size": max(beams, DecodingConfig.max_beam_size),
            "alpha": float(DEFAULT_LENGTH_PENALTY if penalty is None else penalty), "length_penalty": "power",
            "stopping": STOPPING.get(generation.get("early_stopping", False), "transformers"),
            "max_output_length": longest, "max_extra_length": longest,
            "end_at_limit": generation.get("forced_eos_token_id") == special_ids.eos}


def not_honoured(generation, special_ids):
    """`{key: value}` of the generation defaults the searches do not implement (see the module docstring)."""
    found = {}
    bad_words = [words for words in generation.get("bad_words_ids") or [] if words != [special_ids.pad]]
    if bad_words:
        found["bad_words_ids"] = bad_words
    for key, neutral in (("no_repeat_ngram_size", 0), ("repetition_penalty", 1.0), ("min_length", 0),
                         ("min_new_tokens", 0), ("encoder_no_repeat_ngram_size", 0)):
        if generation.get(key) not in (None, neutral):
            found[key] = generation[key]
    if generation.get("early_stopping", False) not in STOPPING:
        found["early_stopping"] = generation["early_stopping"]
    forced_end = generation.get("forced_eos_token_id")
    if forced_end not in (None, special_ids.eos):
        found["forced_eos_token_id"] = forced_end
    if found:
        logger.warning("The checkpoint's generation defaults %s are not implemented by t2t_keras's searches: "
                       "translations may differ from transformers' generate() where they matter.", found)
    return found
