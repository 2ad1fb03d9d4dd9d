"""OPUS-MT checkpoints (Hugging Face's `MarianMTModel`): config.json and the tokenizer files, in our terms.

Marian's Transformer is the paper's post-LN model with these switches: Marian's
[sin..., cos...] sinusoid (`model.position_sinusoid: split`), embeddings scaled or
not (`scale_embedding`), swish (classic OPUS-MT) or ReLU (opus-mt-tc-big), LayerNorm
epsilon 1e-5, a trained bias on the logits (`final_logits_bias`), one vocabulary
shared three ways or a source vocabulary of its own
(`share_encoder_decoder_embeddings: false`), and its own ids: sentences end with
`eos_token_id` (0) and the decoder starts from the pad id. The tokenizer maps
SentencePiece pieces (`source.spm`, `target.spm`) to the ids of `vocab.json` (and
`target_vocab.json`).
"""

from t2t_keras.data.pretrained_tokenizer import archive_files
from t2t_keras.pretrained import settings
from t2t_keras.pretrained.checkpoint import CheckpointError
from t2t_keras.pretrained.weights import EmbeddingNames

FAMILY = "marian"
POSITION_TABLES = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
SHARED = "model.shared.weight"
SIDE_EMBEDDINGS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
# MarianTokenizer's special tokens, looked up by name in vocab.json (tokenizer_config.json may name others)
SPECIAL_TOKENS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}


def embedding_names(shared):
    """The tensors of the embeddings: one shared matrix (`share_encoder_decoder_embeddings`), or one per side."""
    return EmbeddingNames(SHARED, SHARED) if shared else EmbeddingNames(*SIDE_EMBEDDINGS)


def convert(checkpoint, source_lang=None, target_lang=None):
    """The `settings.Imported` of a Marian checkpoint; its tokenizer files are read here."""
    config = checkpoint.config
    settings.check_model_type(config, "marian", FAMILY)
    settings.check_switches(config, FAMILY)
    if source_lang is not None or target_lang is not None:
        raise CheckpointError("--source-lang and --target-lang are for NLLB / M2M-100 checkpoints: an OPUS-MT model "
                              "translates one language pair, or takes the target language as a >>xx<< tag at the "
                              "start of each source sentence. Leave them out.")
    shared = bool(settings.value(config, "share_encoder_decoder_embeddings", True))
    tied = bool(settings.value(config, "tie_word_embeddings", True))
    source_size = settings.value(config, "vocab_size", required=True)
    target_size = source_size if shared else settings.value(config, "decoder_vocab_size", source_size)
    pad = settings.one_id(config, "pad_token_id")
    start = settings.one_id(config, "decoder_start_token_id", required=False)
    start = pad if start is None else start
    bos = settings.one_id(config, "bos_token_id", required=False)
    ids = {"pad": pad, "eos": settings.one_id(config, "eos_token_id"), "decoder_start": start,
           "bos": start if bos is None else bos}  # Marian has no bos of its own: its decoder starts from pad
    tokenizer, ids["unk"] = tokenizer_files(checkpoint, ids, source_size, target_size)
    model = {**settings.stack_sizes(config), "vocab_size": target_size,
             "source_vocab_size": None if source_size == target_size else source_size,
             "tie_embeddings": "all" if shared and tied else ("target" if tied else "none"),
             "scale_embeddings": bool(settings.value(config, "scale_embedding", False)),
             "position_sinusoid": "split", "final_logits_bias": True, "special_ids": ids}
    aliases = (SIDE_EMBEDDINGS if shared else ()) + (("lm_head.weight",) if tied else ()) + POSITION_TABLES
    options = checkpoint.optional_json("tokenizer_config.json")
    languages = tuple(options.get(key) for key in ("source_lang", "target_lang"))
    return settings.Imported(FAMILY, model, tokenizer, embedding_names(shared), aliases,
                             languages=languages if all(languages) else (), position_tables=POSITION_TABLES)


def tokenizer_files(checkpoint, ids, source_size, target_size):
    """`(archive files, source unk id)`: MarianTokenizer's files and how it numbers and ends each side."""
    fix = "download the checkpoint's tokenizer files (source.spm, target.spm, vocab.json) into it"
    options = checkpoint.optional_json("tokenizer_config.json")
    separate = bool(options.get("separate_vocabs", False))
    names = ("vocab.json", "target_vocab.json" if separate else "vocab.json")
    files = {name: checkpoint.read(name, fix) for name in ("source.spm", "target.spm") + names}
    vocabularies = [checkpoint.json(name, fix) for name in names]
    tokens = {key: options.get(f"{key}_token") or default for key, default in SPECIAL_TOKENS.items()}
    sides = []
    for name, vocabulary, size in zip(names, vocabularies, (source_size, target_size)):
        _check_vocabulary(name, vocabulary, size, tokens)
        sides.append({"vocabulary": name, "prefix": [], "suffix": [vocabulary[tokens["eos"]]],
                      "unk": vocabulary[tokens["unk"]], "language_tags": True})
    sides[0]["model"], sides[1]["model"] = "source.spm", "target.spm"
    specials = set(tokens.values()) | _special_tokens(options)
    manifest = {"format": 1, "family": FAMILY, "vocab_size": target_size, "source_vocab_size": source_size,
                "source": sides[0], "target": sides[1], "special_ids": {**ids, "unk": sides[0]["unk"]},
                "skipped_ids": sorted(vocabularies[1][token] for token in specials if token in vocabularies[1])}
    return archive_files(manifest, files), sides[0]["unk"]


def _check_vocabulary(name, vocabulary, size, tokens):
    """A vocabulary that holds the tokenizer's special tokens and numbers pieces within the model's embedding."""
    if not isinstance(vocabulary, dict) or tokens["unk"] not in vocabulary or tokens["eos"] not in vocabulary:
        raise CheckpointError(f"{name} must map pieces to ids and hold {tokens['unk']!r} and {tokens['eos']!r}: "
                              "download the checkpoint's tokenizer files again.")
    largest = max(vocabulary.values())
    if largest >= size:
        raise CheckpointError(f"{name} has id {largest}, but config.json gives that side a vocabulary of {size}: the "
                              "tokenizer files belong to another checkpoint; download them again.")


def _special_tokens(options):
    """The extra special tokens tokenizer_config.json names, which MarianTokenizer's decode leaves out."""
    listed = options.get("additional_special_tokens") or options.get("extra_special_tokens") or []
    added = [entry.get("content") for entry in (options.get("added_tokens_decoder") or {}).values()
             if entry.get("special")]
    return {token for token in list(listed) + added if isinstance(token, str)}
