"""The ids around a model's pieces: what a source holds besides them, what every translation starts with.

A tokenizer trained here gives pieces only: a source is its pieces and the model's end id, and a translation
starts freely after the decoder's start id. An imported checkpoint's tokenizer
(`data.pretrained_tokenizer.PretrainedTokenizer`) knows the ids its Hugging Face tokenizer puts around the pieces
(Marian: the end id after them; NLLB and M2M-100: the source language's code before them and the end id after,
or both after in NLLB's legacy layout), and a multilingual model's translation starts with the target language's
code, forced as the first output token (Hugging Face's `forced_bos_token_id`). A request may name other
languages among the checkpoint's codes (`src_lang`, `tgt_lang`); the run's are those chosen at import.

    rows = layout_of(tokenizer, model.special_ids, src_lang="fra_Latn")
    rows.source(pieces, model.max_length)     # prefix + pieces (cut to fit) + suffix, and whether it was cut
    rows.target_prefix                         # (id of the target language,), or ()
"""

from typing import NamedTuple

from t2t_keras.errors import T2TError

SHOWN_CODES = 12  # language codes an error lists


class Layout(NamedTuple):
    """The ids around the pieces of one request's sources and translations."""

    source_prefix: tuple  # before a source's pieces (NLLB: the source language)
    source_suffix: tuple  # after them, the end id among them
    target_prefix: tuple  # what every translation starts with, forced (NLLB: the target language)

    def source(self, pieces, max_length):
        """`(ids, truncated)`: `pieces` cut so that the row fits in `max_length` ids, between prefix and suffix."""
        room = max(0, max_length - len(self.source_prefix) - len(self.source_suffix))
        kept = [int(i) for i in pieces[:room]]
        return list(self.source_prefix) + kept + list(self.source_suffix), len(pieces) > room

    def target(self, pieces, end):
        """The ids a translation `pieces` stands for as the decoder outputs them: the forced prefix, the pieces,
        the `end` id."""
        return list(self.target_prefix) + [int(i) for i in pieces] + [end]


def has_own_ids(tokenizer):
    """Whether `tokenizer` puts ids of its own around the pieces (an imported checkpoint's)."""
    return hasattr(tokenizer, "source_affixes")


def is_multilingual(tokenizer):
    """Whether `tokenizer` is a multilingual checkpoint's, with language codes (NLLB, M2M-100)."""
    return bool(getattr(tokenizer, "language_codes", None))


def layout_of(tokenizer, special_ids, src_lang=None, tgt_lang=None, where="the model's tokenizer"):
    """The `Layout` of `tokenizer`'s model (`special_ids`: its `SpecialIds`), with the languages of a request
    (None: the run's); `where` names the tokenizer in an error about a code it lacks."""
    if not is_multilingual(tokenizer) and (src_lang, tgt_lang) != (None, None):
        field = "src_lang" if src_lang is not None else "tgt_lang"
        raise T2TError(f"{field} chooses a language of a multilingual model (NLLB, M2M-100), and this model has no "
                       "language codes: leave it out.")
    if not has_own_ids(tokenizer):
        return Layout((), (special_ids.eos,), ())
    source = None if src_lang is None else language_id(tokenizer, "src_lang", src_lang, where)
    prefix, suffix = (tuple(int(i) for i in part.numpy()) for part in tokenizer.source_affixes(source))
    if not is_multilingual(tokenizer):
        return Layout(prefix, suffix, ())
    target = tokenizer.languages[1] if tgt_lang is None else tgt_lang
    return Layout(prefix, suffix, (language_id(tokenizer, "tgt_lang", target, where),))


def language_id(tokenizer, field, code, where="the model's tokenizer"):
    """The id of language `code` of a multilingual `tokenizer`, or a T2TError naming the code, the field (and its
    flag) and the codes the checkpoint has."""
    found = tokenizer.language_id(code) if is_multilingual(tokenizer) else None
    if found is None:
        raise T2TError(unknown_language(field, code, sorted(getattr(tokenizer, "language_codes", {})), where))
    return found


def unknown_language(field, code, codes, where):
    """The message for a language code a model lacks: which field, which code, where the model's list is."""
    flag = {"src_lang": "--source-lang", "tgt_lang": "--target-lang"}[field]
    shown = ", ".join(codes[:SHOWN_CODES]) + (" ..." if len(codes) > SHOWN_CODES else "")
    return (f"{field} ({flag}) {code!r} is not a language code of this model: {where} lists its {len(codes)} codes "
            f"({shown}), the checkpoint's own. Give one of them.")


def source_pieces(tokenizer, strings):
    """int32 ragged `(batch, (ids))`: the pieces of source `strings`, without the ids a layout adds."""
    return tokenizer.source_pieces(strings) if has_own_ids(tokenizer) else tokenizer.tokenize(strings)


def target_pieces(tokenizer, strings):
    """int32 ragged `(batch, (ids))`: the pieces of target `strings` (a reference, a constraint's term), without
    the ids a layout adds."""
    return tokenizer.target_pieces(strings) if has_own_ids(tokenizer) else tokenizer.tokenize(strings)
