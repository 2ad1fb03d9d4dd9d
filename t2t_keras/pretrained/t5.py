"""T5-family checkpoints (Hugging Face's `T5ForConditionalGeneration`, `MT5ForConditionalGeneration`,
`UMT5ForConditionalGeneration`) in our terms: T5, Flan-T5, mT5, MADLAD-400 and umT5.

What T5 changes from the paper, each a model switch: T5's relative position bias instead of added sinusoids
(`position_encoding: relative`, one table per stack, bidirectional in the encoder, causal in the decoder; umT5's
in every layer's self-attention: `relative_bias_per_layer`), RMS normalisation before each sublayer and once at
the end of each stack (`normalization: rms`, `normalize_first`),
no biases (`use_bias: false`), no 1/sqrt(d_k) (`scale_attention: false`), unscaled embeddings, the gated
feed-forward of v1.1 / mT5 / MADLAD (`gated_feed_forward`, "gated-gelu": `gelu_tanh`) or v1.0's ReLU, and the
output projection untied (`lm_head.weight`) or tied to the embedding with the decoder output scaled by
d_model^-0.5 (`scale_decoder_output`).

config.json is read as written by either transformers: the projection is untied exactly when the weights hold an
`lm_head.weight` that differs from `shared.weight` (transformers 5 re-saves every T5 config with
`tie_word_embeddings: true`), and the decoder output is scaled when `scale_decoder_outputs` says so, else when
`tie_word_embeddings` is not false (transformers 4's rule: the released umT5 files, whose `tie_word_embeddings:
false` transformers 5's UMT5Config overrides, are untied and unscaled). Both stacks embed with `shared.weight`; a
checkpoint that also stores `encoder.embed_tokens.weight` or `decoder.embed_tokens.weight` (MADLAD-400) must store
the same matrix there.

The tokenizer: `spiece.model`, whose ids are the model's (<pad> 0, </s> 1, <unk> 2), the sentinels
`<extra_id_N>` after its pieces (N = 0 the last id), </s> after each text. MADLAD-400's target language is a tag
`<2xx>` before the source (`--target-lang xx`), as transformers' tokenizer gives it for "<2xx> text": the tag's
id, then the text's pieces.
"""

import json

from t2t_keras.data.pretrained_tokenizer import archive_files
from t2t_keras.pretrained import settings
from t2t_keras.pretrained.checkpoint import CheckpointError, equal_tensors
from t2t_keras.pretrained.t5_weights import T5_ALIASES, t5_assignments
from t2t_keras.pretrained.weights import EmbeddingNames

FAMILY = "t5"
MODEL_TYPES = ("t5", "mt5", "umt5")  # umt5: mT5 with a relative position table in every layer
SPM = "spiece.model"
SHARED = "shared.weight"
# feed_forward_proj -> (gated, model.activation)
FEED_FORWARD = {"relu": (False, "relu"), "gated-gelu": (True, "gelu_tanh"), "gated-relu": (True, "relu"),
                "gelu": (False, "gelu"), "gated-silu": (True, "swish")}


def convert(checkpoint, source_lang=None, target_lang=None):
    """The `settings.Imported` of a T5-family checkpoint; `target_lang`: MADLAD-400's target language."""
    config = checkpoint.config
    if config.get("model_type") not in MODEL_TYPES:
        settings.check_model_type(config, "t5", FAMILY)
    if source_lang is not None:
        raise CheckpointError("--source-lang is not for T5-family checkpoints: the source language is read from the "
                              "text. Leave it out (MADLAD-400 takes --target-lang).")
    vocab_size = settings.value(config, "vocab_size", required=True)
    # the tokenizer first: a wrong --target-lang is refused before the weights are hashed
    tokenizer, ids, tag = tokenizer_files(checkpoint, _special_ids(config), vocab_size, target_lang)
    tensors = checkpoint.tensors()
    untied = _untied(tensors)
    model = {**_sizes(config), "vocab_size": vocab_size, "tie_embeddings": "none" if untied else "all",
             "scale_decoder_output": _scaled_output(config), "special_ids": ids}
    _check_stack_embeddings(tensors)
    aliases = tuple(name for name in T5_ALIASES + (() if untied else ("lm_head.weight",)) if name in tensors)
    generation = {"target_language_tag": tag} if tag else {}
    return settings.Imported(FAMILY, model, tokenizer, EmbeddingNames(SHARED, SHARED), aliases,
                             generation=generation, weight_map=t5_assignments)


def _special_ids(config):
    """pad, eos and the decoder start (MADLAD-400: 0) of config.json; T5 has no bos: the decoder start stands in."""
    pad, eos = settings.one_id(config, "pad_token_id"), settings.one_id(config, "eos_token_id")
    start = settings.one_id(config, "decoder_start_token_id", required=False)
    start = pad if start is None else start
    return {"pad": pad, "eos": eos, "decoder_start": start, "bos": start}


def _sizes(config):
    """The model section's sizes and T5's switches."""
    proj = settings.value(config, "feed_forward_proj", "relu")
    if proj not in FEED_FORWARD:
        raise settings.refuse("feed_forward_proj", proj,
                              f"the feed-forward variants imported are {sorted(FEED_FORWARD)}")
    if not settings.value(config, "is_encoder_decoder", True):
        raise settings.refuse("is_encoder_decoder", False, "only the encoder-decoder translation model is imported")
    gated, activation = FEED_FORWARD[proj]
    layers = settings.value(config, "num_layers", required=True)
    heads, head_dim = settings.value(config, "num_heads", required=True), settings.value(config, "d_kv", 64)
    return {"hidden_dim": settings.value(config, "d_model", required=True), "num_layers": layers,
            "num_decoder_layers": settings.value(config, "num_decoder_layers", layers),
            "num_heads": heads, "key_dim": head_dim, "value_dim": head_dim,
            "intermediate_dim": settings.value(config, "d_ff", required=True), "activation": activation,
            "gated_feed_forward": gated, "dropout": float(settings.value(config, "dropout_rate", 0.1)),
            "position_encoding": "relative", "relative_bias_per_layer": config.get("model_type") == "umt5",
            "relative_buckets": settings.value(config, "relative_attention_num_buckets", 32),
            "relative_max_distance": settings.value(config, "relative_attention_max_distance", 128),
            "max_length": max(512, int(settings.value(config, "n_positions", 512))),
            "normalization": "rms", "normalize_first": True,
            "layer_norm_epsilon": float(settings.value(config, "layer_norm_epsilon", 1e-6)),
            "use_bias": False, "scale_attention": False, "scale_embeddings": False}


def _untied(tensors):
    """Whether the output projection is a matrix of its own: an `lm_head.weight` other than `shared.weight`."""
    return "lm_head.weight" in tensors and not equal_tensors(tensors, "lm_head.weight", SHARED)


def _scaled_output(config):
    """transformers 5's `scale_decoder_outputs` where written, else transformers 4's `tie_word_embeddings`."""
    if config.get("scale_decoder_outputs") is not None:
        return bool(config["scale_decoder_outputs"])
    return config.get("tie_word_embeddings", True) is not False


def _check_stack_embeddings(tensors):
    """Both stacks embed with shared.weight (as transformers 4 ties them): a copy stored apart must equal it."""
    for name in T5_ALIASES:
        if name in tensors and not equal_tensors(tensors, name, SHARED):
            raise CheckpointError(f"The checkpoint's {name} differs from {SHARED}, which T5 models embed with; "
                                  "the two do not belong to one model: download the checkpoint again.")


def tokenizer_files(checkpoint, ids, vocab_size, target_lang):
    """`(archive files, the special ids with spiece.model's unk, the target-language tag or None)`: spiece.model's
    pieces and ids, the sentinels."""
    import sentencepiece

    spm = checkpoint.read(SPM, f"download the checkpoint's {SPM} into it (transformers 5 saves only "
                               "tokenizer.json: take spiece.model from the model's repository)")
    processor = sentencepiece.SentencePieceProcessor(model_proto=spm)
    ids = {**ids, "unk": processor.unk_id()}
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocabulary = {piece: index for index, piece in enumerate(pieces)}
    sentinels = _sentinels(checkpoint, len(pieces))
    vocabulary.update(sentinels)
    largest = max(vocabulary.values())
    if largest >= vocab_size:
        raise CheckpointError(f"The tokenizer has id {largest}, but config.json's vocab_size is {vocab_size}: the "
                              "tokenizer files belong to another checkpoint; download them again.")
    tags = sorted(piece for piece in pieces if piece.startswith("<2") and piece.endswith(">"))
    prefix, tag = _target_tag(target_lang, tags, vocabulary)
    sides = [{"model": SPM, "vocabulary": "vocab.json", "unk": ids["unk"], "prefix": prefix if side == "source"
              else [], "suffix": [ids["eos"]]} for side in ("source", "target")]
    skipped = {ids["pad"], ids["eos"], ids["unk"]} | set(sentinels.values())
    manifest = {"format": 1, "family": FAMILY, "vocab_size": vocab_size, "source": sides[0], "target": sides[1],
                "special_ids": ids, "skipped_ids": sorted(skipped), "strip": "leading"}
    files = {SPM: spm, "vocab.json": json.dumps(vocabulary, ensure_ascii=False).encode("utf-8")}
    return archive_files(manifest, files), ids, tag


def _sentinels(checkpoint, pieces):
    """`{<extra_id_N>: id}`: tokenizer.json's added sentinels where it has them, else T5Tokenizer's numbering of
    `extra_ids` (100 by default) after the `pieces`, `<extra_id_0>` last."""
    if checkpoint.has("tokenizer.json"):
        added = checkpoint.json("tokenizer.json").get("added_tokens") or []
        found = {entry["content"]: entry["id"] for entry in added if str(entry.get("content")).startswith("<extra_id_")}
        if found:
            return found
    options = checkpoint.optional_json("tokenizer_config.json")
    extra = int(options.get("extra_ids", 100))
    return {f"<extra_id_{i}>": pieces + extra - 1 - i for i in range(extra)}


def _target_tag(target_lang, tags, vocabulary):
    """`(source prefix ids, tag)` for `--target-lang`: MADLAD-400's `<2xx>` tag, refused with the list."""
    if target_lang is None:
        return [], None
    tag = target_lang if target_lang.startswith("<2") else f"<2{target_lang}>"
    if tag not in tags:
        shown = ", ".join(tags[:12]) + (" ..." if len(tags) > 12 else "")
        listing = f"its {len(tags)} tags are {shown}" if tags else "it has no target-language tags <2xx> (MADLAD-400's)"
        raise CheckpointError(f"--target-lang {target_lang!r}: the checkpoint's tokenizer has no {tag}; {listing}. "
                              "Give --target-lang one of them (e.g. de for <2de>), or leave it out.")
    return [vocabulary[tag]], tag
