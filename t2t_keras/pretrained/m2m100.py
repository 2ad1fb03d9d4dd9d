"""M2M-100 and NLLB-200 checkpoints (Hugging Face's `M2M100ForConditionalGeneration`) in our terms.

fairseq's Transformer: pre-LN blocks with a final LayerNorm per stack
(`model.normalize_first`), embeddings scaled by sqrt(d_model), fairseq's sinusoid
(`model.position_sinusoid: fairseq`) counted from padding id + 1, LayerNorm epsilon
1e-5, one vocabulary shared three ways, and fairseq's ids: `<s>` 0, `<pad>` 1, `</s>`
2 (also the decoder's start), `<unk>` 3. The language codes are tokens: the
source's comes first in the source (NllbTokenizer's default; last, after the eos,
with `legacy_behaviour`), and generation forces the target's as the first output
(`forced_bos_token_id`). The run's languages are chosen at import
(`--source-lang`, `--target-lang`) among the checkpoint's codes.

The tokenizer files: `sentencepiece.bpe.model` for the pieces, and their ids from
`tokenizer.json` (NLLB: the vocabulary and the language codes as added tokens) or
from `vocab.json` (M2M-100: the codes `__xx__` numbered after it, in M2M100Tokenizer's
order).
"""

import json

from t2t_keras.data.pretrained_tokenizer import archive_files
from t2t_keras.pretrained import settings
from t2t_keras.pretrained.checkpoint import CheckpointError
from t2t_keras.pretrained.m2m100_languages import LANGUAGE_CODES
from t2t_keras.pretrained.weights import EmbeddingNames

FAMILY = "m2m100"
SHARED = "model.shared.weight"
ALIASES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
SPM = "sentencepiece.bpe.model"
WORD_MARK = "\u2581"  # SentencePiece's "▁"
STANDARD_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def convert(checkpoint, source_lang=None, target_lang=None):
    """The `settings.Imported` of an M2M-100 / NLLB checkpoint translating `source_lang` into `target_lang`."""
    config = checkpoint.config
    settings.check_model_type(config, "m2m_100", FAMILY)
    settings.check_switches(config, FAMILY)
    pad, eos = settings.one_id(config, "pad_token_id"), settings.one_id(config, "eos_token_id")
    start = settings.one_id(config, "decoder_start_token_id", required=False)
    bos = settings.one_id(config, "bos_token_id", required=False)
    ids = {"pad": pad, "eos": eos, "decoder_start": eos if start is None else start, "bos": 0 if bos is None else bos}
    vocab_size = settings.value(config, "vocab_size", required=True)
    tokenizer, unk = tokenizer_files(checkpoint, vocab_size, (source_lang, target_lang), ids)
    tied = bool(settings.value(config, "tie_word_embeddings", True))
    model = {**settings.stack_sizes(config), "vocab_size": vocab_size, "tie_embeddings": "all" if tied else "none",
             "scale_embeddings": bool(settings.value(config, "scale_embedding", True)),
             "position_sinusoid": "fairseq", "position_offset": pad + 1, "normalize_first": True,
             "special_ids": {**ids, "unk": unk}}
    aliases = ALIASES + (("lm_head.weight",) if tied else ())
    target_code = json.loads(tokenizer["manifest.json"])["languages"]["target_id"]
    return settings.Imported(FAMILY, model, tokenizer, EmbeddingNames(SHARED, SHARED), aliases,
                             languages=(source_lang, target_lang), generation={"forced_bos_token_id": target_code})


def tokenizer_files(checkpoint, vocab_size, languages, ids):
    """`(archive files, unk id)`: the pieces' ids, the language codes around them, what decoding leaves out."""
    options = checkpoint.optional_json("tokenizer_config.json")
    spm = checkpoint.read(SPM, f"download the checkpoint's {SPM} into it")
    vocabulary, codes = _nllb_vocabulary(checkpoint, options) if checkpoint.has("tokenizer.json") \
        else _m2m_vocabulary(checkpoint, options)
    flags = ("--source-lang", "--target-lang")
    source, target = (_language_id(flag, language, codes) for flag, language in zip(flags, languages))
    largest = max(vocabulary.values())
    if largest >= vocab_size:
        raise CheckpointError(f"The tokenizer has id {largest}, but config.json's vocab_size is {vocab_size}: the "
                              "tokenizer files belong to another checkpoint; download them again.")
    unk = vocabulary.get(options.get("unk_token") or "<unk>", 3)
    legacy = bool(options.get("legacy_behaviour", False))
    sides = [{"model": SPM, "vocabulary": "vocab.json", "unk": unk, "prefix": [] if legacy else [code],
              "suffix": [ids["eos"], code] if legacy else [ids["eos"]]} for code in (source, target)]
    fast = checkpoint.has("tokenizer.json") and WORD_MARK in vocabulary  # transformers' NllbTokenizer (tokenizers)
    for side in sides if fast else ():
        side["trailing_space"] = vocabulary[WORD_MARK]
    skipped = {vocabulary[token] for token in STANDARD_TOKENS if token in vocabulary} | set(codes.values())
    manifest = {"format": 1, "family": FAMILY, "vocab_size": vocab_size, "source": sides[0], "target": sides[1],
                "special_ids": {**ids, "unk": unk}, "skipped_ids": sorted(skipped),
                "strip": "leading" if fast else "both",
                "languages": {"source": languages[0], "target": languages[1], "target_id": target, "codes": codes}}
    files = {SPM: spm, "vocab.json": json.dumps(vocabulary, ensure_ascii=False).encode("utf-8")}
    return archive_files(manifest, files), unk


def _nllb_vocabulary(checkpoint, options):
    """`(piece -> id, language code -> id)` from tokenizer.json: its model's vocabulary and its added tokens."""
    document = checkpoint.json("tokenizer.json")
    vocabulary = (document.get("model") or {}).get("vocab")
    if isinstance(vocabulary, list):  # a unigram model lists [piece, score] in id order
        vocabulary = {piece: index for index, (piece, _) in enumerate(vocabulary)}
    if not isinstance(vocabulary, dict):
        raise CheckpointError("tokenizer.json has no model vocabulary: download the checkpoint's tokenizer.json "
                              "again.")
    added = {entry["content"]: entry["id"] for entry in document.get("added_tokens", [])}
    vocabulary = {**vocabulary, **added}
    listed = _listed_codes(options) or [token for token in added if token not in STANDARD_TOKENS]
    return vocabulary, {code: vocabulary[code] for code in listed if code in vocabulary}


def _m2m_vocabulary(checkpoint, options):
    """`(piece -> id, code -> id)` as M2M100Tokenizer numbers them: vocab.json, then the language codes `__xx__` of
    its `language_codes` list (m2m100_languages.py)."""
    vocabulary = checkpoint.json("vocab.json", "download the checkpoint's tokenizer files (vocab.json, "
                                               f"{SPM}, tokenizer_config.json) into it")
    kind = options.get("language_codes", "m2m100")
    if kind not in LANGUAGE_CODES:
        raise CheckpointError(f"tokenizer_config.json sets language_codes={kind!r}; M2M100Tokenizer's code lists are "
                              f"{sorted(LANGUAGE_CODES)}: download the checkpoint's tokenizer_config.json again.")
    codes = {f"__{code}__": len(vocabulary) + index for index, code in enumerate(LANGUAGE_CODES[kind])}
    return {**vocabulary, **codes}, codes


def _listed_codes(options):
    listed = options.get("additional_special_tokens") or options.get("extra_special_tokens") or []
    return [token for token in listed if isinstance(token, str) and token not in STANDARD_TOKENS]


def _language_id(flag, language, codes):
    """The id of a language code of the checkpoint (M2M-100's `en` also as `__en__`), or an error listing them."""
    for candidate in (language, f"__{language}__"):
        if candidate in codes:
            return codes[candidate]
    shown = ", ".join(sorted(codes)[:12]) + (" ..." if len(codes) > 12 else "")
    what = "is required" if language is None else f"{language!r} is not one of its language codes"
    raise CheckpointError(f"{flag} {what}: this checkpoint translates between {len(codes)} languages ({shown}). "
                          f"Give {flag} one of them, e.g. {flag} {sorted(codes)[0] if codes else 'eng_Latn'}.")
