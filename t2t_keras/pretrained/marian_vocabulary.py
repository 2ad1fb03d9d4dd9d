"""The tokenizer files of an OPUS-MT checkpoint, from a run's tokenizer (`export --format marian`).

MarianTokenizer segments text with SentencePiece (`source.spm`, `target.spm`) and numbers the pieces with
`vocab.json` (and `target_vocab.json` when the sides have vocabularies of their own); it finds its `</s>`,
`<unk>` and `<pad>` there by name and appends `</s>` to every sentence. A run trained here with a SentencePiece
tokenizer (`data.tokenizer` bpe or unigram) has one model for both sides, whose ids are the model's:
`vocab.json` maps each of its pieces to its id, and its special pieces are named as MarianTokenizer names them
(`<pad>` 0, `<unk>` 1, `</s>` 3; `<s>` 2 is a piece like any other there, and the decoder's start). A run
imported from an OPUS-MT checkpoint gives back the files it was imported from. A WordPiece tokenizer has no
SentencePiece model, and an imported M2M-100 / NLLB run numbers fairseq's way: both are refused.
"""

import json
from typing import NamedTuple

from t2t_keras.pretrained import marian
from t2t_keras.pretrained.checkpoint import CheckpointError

SPM_FILES = ("source.spm", "target.spm")
SENTENCEPIECE_KINDS = ("bpe", "unigram")


class MarianVocabulary(NamedTuple):
    """The tokenizer files and each side's piece -> id mapping."""

    files: dict  # name -> bytes: source.spm, target.spm, vocab.json (and target_vocab.json)
    source: dict  # piece -> id of the source side
    target: dict  # piece -> id of the target side

    @property
    def separate(self):
        return "target_vocab.json" in self.files


def check_tokenizer_kind(kind):
    """Refuses a `data.tokenizer` other than SentencePiece's (bpe, unigram) or an imported checkpoint's."""
    if kind not in SENTENCEPIECE_KINDS + ("pretrained",):
        _refuse(f"a {kind} tokenizer")


def marian_vocabulary(tokenizer, kind):
    """The `MarianVocabulary` of a run's tokenizer of `data.tokenizer` `kind`; a CheckpointError naming the
    tokenizer when MarianTokenizer cannot reproduce it."""
    check_tokenizer_kind(kind)
    if kind in SENTENCEPIECE_KINDS:
        return _sentencepiece_vocabulary(tokenizer.model_bytes)
    if tokenizer.manifest.get("family") != marian.FAMILY:
        _refuse(f"the tokenizer of an imported {tokenizer.manifest.get('family')} checkpoint (fairseq's ids)")
    return _imported_vocabulary(tokenizer)


def _refuse(what):
    raise CheckpointError(
        "--format marian writes MarianTokenizer's files (source.spm, target.spm, vocab.json), which hold "
        f"SentencePiece models; this run has {what}, which MarianTokenizer cannot reproduce. Export it with "
        "--format saved_model, or train a run with data.tokenizer bpe or unigram (SentencePiece).")


def _sentencepiece_vocabulary(model_bytes):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model_bytes)
    pieces = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    files = {name: model_bytes for name in SPM_FILES}
    files["vocab.json"] = _json_bytes(pieces)
    return MarianVocabulary(files, pieces, pieces)


def _imported_vocabulary(tokenizer):
    manifest, files = tokenizer.manifest, tokenizer.files
    names = [manifest[side]["vocabulary"] for side in ("source", "target")]
    kept = {name: files[name] for name in set(SPM_FILES) | set(names)}
    source, target = (json.loads(files[name].decode("utf-8")) for name in names)
    return MarianVocabulary(kept, source, target)


def check_special_tokens(vocabulary, special_ids):
    """Refuses a vocabulary where MarianTokenizer's `</s>`, `<unk>` or `<pad>` is not the model's id of it."""
    for side, pieces in (("source", vocabulary.source), ("target", vocabulary.target)):
        for key, token in marian.SPECIAL_TOKENS.items():
            wanted = getattr(special_ids, key)
            if pieces.get(token) != wanted:
                raise CheckpointError(
                    f"MarianTokenizer finds the {key} token by its name {token!r}, which the {side} vocabulary gives "
                    f"id {pieces.get(token)!r}, but the model's {key} id (model.special_ids.{key}) is {wanted}: a "
                    "checkpoint written from it would tokenize differently. Export it with --format saved_model.")


def tokenizer_documents(vocabulary, max_length):
    """tokenizer_config.json and special_tokens_map.json, as `MarianTokenizer.save_pretrained` writes them."""
    tokens = marian.SPECIAL_TOKENS
    added = {str(vocabulary.source[token]): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                                             "single_word": False, "special": True} for token in tokens.values()}
    config = {"added_tokens_decoder": dict(sorted(added.items(), key=lambda item: int(item[0]))),
              **{f"{key}_token": token for key, token in tokens.items()},
              "model_max_length": int(max_length), "separate_vocabs": vocabulary.separate, "source_lang": None,
              "sp_model_kwargs": {}, "target_lang": None, "tokenizer_class": "MarianTokenizer"}
    return {"tokenizer_config.json": config,
            "special_tokens_map.json": {f"{key}_token": token for key, token in tokens.items()}}


def _json_bytes(document):
    return json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8")
