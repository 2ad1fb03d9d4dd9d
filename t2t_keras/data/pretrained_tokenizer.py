"""The tokenizer of an imported checkpoint (`data.tokenizer: pretrained`): its SentencePiece models, its ids.

A Hugging Face translation checkpoint segments text with SentencePiece but numbers
the pieces with a vocabulary of its own: OPUS-MT (Marian) with `vocab.json` (and
`target_vocab.json` when source and target vocabularies are separate), not
SentencePiece's ids; NLLB and M2M-100 with fairseq's dictionary, SentencePiece's
ids shifted past fairseq's special tokens, and the language codes after them.
`PretrainedTokenizer` runs in the TensorFlow graph with stock TF and TF-Text ops:
TF-Text's `SentencepieceTokenizer` gives the pieces (strings), a
`tf.lookup.StaticHashTable` maps them to the checkpoint's ids (unknown pieces to its
unk id), and each side's fixed prefix and suffix ids are added as the checkpoint's
own tokenizer adds them (Marian: the eos after the pieces; NLLB: the language code
before them and the eos after). Marian's `>>xx<<` language tag at the start of a
source passes through as one token, as transformers' `MarianTokenizer` passes it.

Saved as one zip archive (`tokenizer_filename("pretrained")`): the checkpoint's
SentencePiece models and vocabularies, and `manifest.json` naming them, the
prefixes and suffixes, the ids left out of detokenized text and the vocabulary
size. Text is written from the pieces as the checkpoints' tokenizers write it (the
pieces joined, "▁" as a space, stripped; NLLB's `tokenizers` version strips only the
first space, and keeps a text's final space as a "▁" piece), which assumes
SentencePiece models without byte fallback (those of OPUS-MT, M2M-100 and NLLB have
none). Pieces are mapped with the source side's files by `tokenize`, the target
side's by `tokenize_target`; `detokenize` and `id_to_piece` read target ids.
"""

import io
import json
import zipfile

import tensorflow as tf
import tensorflow_text as tf_text

from t2t_keras.data.tokenizer import _SharedModelResource
from t2t_keras.errors import DataError, VocabularyError
from t2t_keras.files import write_bytes_atomic
from t2t_keras.special_ids import SpecialIds

MANIFEST = "manifest.json"
FORMAT = 1
SIDES = ("source", "target")
_LANGUAGE_TAG = r"(?s)^(>>.*?<<)?.*$"  # MarianTokenizer.remove_language_code: ">>" up to the first "<<"
WORD_MARK = "\u2581"  # SentencePiece's "▁", a space before the piece
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # a fixed time: the same files make the same archive (runs compare its sha256)


class _Side:
    """One side's SentencePiece model and piece -> id table, and the ids around its pieces."""

    def __init__(self, files, settings, codes=()):
        self.language_tags = bool(settings.get("language_tags", False))
        self.prefix = tf.constant(settings.get("prefix", []), tf.int32)
        self.suffix = tf.constant(settings.get("suffix", []), tf.int32)
        self.trailing_space = settings.get("trailing_space")  # the id of "▁" after a text that ends with a space
        # the language code's id among the prefix and suffix (NLLB, M2M-100), if any
        self.code = next((i for i in settings.get("prefix", []) + settings.get("suffix", []) if i in codes), None)
        self.sentencepiece = sentencepiece_pieces(files[settings["model"]])
        vocabulary = json.loads(files[settings["vocabulary"]].decode("utf-8"))
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(vocabulary), tf.string),
                                                tf.constant(list(vocabulary.values()), tf.int64)),
            default_value=tf.constant(settings["unk"], tf.int64))  # an unknown piece: the side's unk id
        self.vocabulary = vocabulary

    def ids(self, strings, language=None):
        """int32 ragged `(batch, (ids))` of a `(batch,)` string tensor: the prefix, the pieces, the suffix
        (`language`: the language code's id in them, see `affixes`)."""
        batch = tf.shape(strings)[0]
        around = [tf.RaggedTensor.from_tensor(tf.tile(part[None], [batch, 1])) for part in self.affixes(language)]
        return tf.concat([around[0], self.pieces(strings), around[1]], axis=1)

    def affixes(self, language=None):
        """int32 `(prefix, suffix)`: the ids before and after the pieces, the language code replaced by `language`
        (an id, a scalar tensor too) where given."""
        if language is None or self.code is None:
            return self.prefix, self.suffix
        return tuple(tf.where(tf.equal(part, self.code), tf.cast(language, tf.int32), part)
                     for part in (self.prefix, self.suffix))

    def pieces(self, strings):
        """int32 ragged `(batch, (ids))` of the pieces of a `(batch,)` string tensor, without prefix or suffix."""
        text = strings
        if self.language_tags:
            tag = tf.strings.regex_replace(strings, _LANGUAGE_TAG, r"\1")
            text = tf.strings.substr(strings, tf.strings.length(tag), tf.strings.length(strings))
        pieces = self.sentencepiece.tokenize(text)  # ragged tf.string
        if self.language_tags:
            tags = tf.ragged.boolean_mask(tag[:, None], tf.not_equal(tag, "")[:, None])
            pieces = tf.concat([tags, pieces], axis=1)
        ids = tf.cast(tf.ragged.map_flat_values(self.table.lookup, pieces), tf.int32)
        batch = tf.shape(strings)[0]
        if self.trailing_space is not None:  # transformers' fast NLLB tokenizer keeps one "▁" for it; SentencePiece
            ends = tf.strings.regex_full_match(strings, r"(?s).*\s")  # drops it
            ids = tf.concat([ids, tf.ragged.boolean_mask(tf.fill([batch, 1], self.trailing_space), ends[:, None])], 1)
        return ids


def sentencepiece_pieces(model_bytes):
    """TF-Text's SentencePiece tokenizer of `model_bytes` giving pieces (strings), its model held by name (see
    `data.tokenizer._SharedModelResource`: it outlives TensorFlow's kernel caches)."""
    tokenizer = tf_text.SentencepieceTokenizer(model=model_bytes, out_type=tf.string, add_bos=False, add_eos=False)
    tokenizer._model_resource = _SharedModelResource(model_bytes)
    return tokenizer


class PretrainedTokenizer(tf.Module):
    """The tokenizer of an imported checkpoint, in the graph (see the module's docstring).

    Args:
        files: `{name: bytes}`: `manifest.json` and the files it names.
        name: name of the module.

    Example:

        tokenizer = PretrainedTokenizer.load("RUN/tokenizer.zip")
        tokenizer.tokenize([">>deu<< Hello."])   # the model's source ids, its eos included
        tokenizer.detokenize(target_ids)          # the text, special ids left out
    """

    def __init__(self, files, name=None):
        super().__init__(name=name)
        self._files = dict(files)
        manifest = json.loads(self._files[MANIFEST].decode("utf-8"))
        _check_manifest(manifest, self._files)
        self.manifest = manifest
        self.special_ids = SpecialIds.of(manifest["special_ids"])
        codes = set(self.language_codes.values())
        self._source = _Side(self._files, manifest["source"], codes)
        self._target = self._source if manifest["target"] == manifest["source"] else \
            _Side(self._files, manifest["target"], codes)
        pieces = self._target.vocabulary
        self._pieces = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(pieces.values()), tf.int64),
                                                tf.constant(list(pieces), tf.string)), default_value="")
        self._skipped = tf.constant(sorted(set(manifest["skipped_ids"])), tf.int32)
        self._languages = _language_table(self.language_codes)
        # The sides' SentencePiece models and tables, tracked by this module: a SavedModel holding it saves them.
        self._side_resources = [(side.sentencepiece, side.table) for side in (self._source, self._target)]

    @classmethod
    def load(cls, path):
        """Reads a tokenizer archive written by `save`."""
        try:
            with zipfile.ZipFile(path) as archive:
                return cls({name: archive.read(name) for name in archive.namelist()})
        except FileNotFoundError:
            raise DataError(f"Tokenizer archive {path} does not exist: import the checkpoint again "
                            "(t2t-keras import) or fix the path.") from None
        except (zipfile.BadZipFile, KeyError) as error:
            raise VocabularyError(f"{path} is not a tokenizer archive of t2t-keras import ({error}): import the "
                                  "checkpoint again.") from None

    def save(self, path):
        """Writes the archive (the same files give the same bytes) to `path` atomically."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(self._files):
                archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), self._files[name], zipfile.ZIP_DEFLATED)
        write_bytes_atomic(path, buffer.getvalue())

    @property
    def kind(self):
        return "pretrained"

    @property
    def files(self):
        """`{name: bytes}`: the archive's files (`manifest.json` and the checkpoint's files it names)."""
        return dict(self._files)

    @property
    def vocab_size(self):
        """The model's (target) vocabulary size: ids run from 0 to vocab_size - 1."""
        return int(self.manifest["vocab_size"])

    @property
    def source_vocab_size(self):
        """The source embedding's size (the vocabulary size unless the sides have their own)."""
        return int(self.manifest.get("source_vocab_size", self.manifest["vocab_size"]))

    def tokenize(self, strings, language=None):
        """The model's source ids of `strings` (`[batch]`, or a scalar: a 1-D result), with the checkpoint's
        prefix (NLLB: the source language; `language`: another code's id) and end of sentence: int32 ragged
        `[batch, (ids)]`."""
        return self._each(self._source.ids, strings, language)

    def tokenize_target(self, strings, language=None):
        """The target ids of `strings` as the checkpoint's tokenizer makes labels (NLLB: the target language
        first), its end of sentence last."""
        return self._each(self._target.ids, strings, language)

    def source_pieces(self, strings):
        """The source ids of `strings` without the prefix and suffix `tokenize` adds (`source_affixes`)."""
        return self._each(self._source.pieces, strings)

    def target_pieces(self, strings):
        """The target ids of `strings` without the prefix and suffix `tokenize_target` adds."""
        return self._each(self._target.pieces, strings)

    def source_affixes(self, language=None):
        """int32 `(prefix, suffix)`: the ids `tokenize` puts before and after the pieces (Marian: none, and the end
        id; NLLB and M2M-100: the source language's code, and the end id), the code replaced by `language` (its
        id: an int or a scalar tensor) where given."""
        return self._source.affixes(language)

    def tokenize_pieces(self, strings, target=False):
        """What `tokenize` (or, `target`, `tokenize_target`) gives without the end of sentence it appends: the
        ids the training pipeline frames with the model's own eos and decoder start (`data.framing`).

        Raises:
          VocabularyError: the side ends sentences with more than its eos (NLLB's `legacy_behaviour` puts the
            language code after it), which that framing cannot give.
        """
        side = "target" if target else "source"
        suffix = [int(i) for i in self.manifest[side].get("suffix", [])]
        if suffix != [self.special_ids.eos]:
            raise VocabularyError(
                f"The checkpoint's tokenizer ends each {side} with the ids {suffix}, not with its eos "
                f"({self.special_ids.eos}) alone (NLLB's legacy_behaviour puts the language code last): training "
                "frames a sentence as its pieces and the eos, so a run of this checkpoint cannot train. Import the "
                "checkpoint again with legacy_behaviour false in its tokenizer_config.json.")
        ids = (self.tokenize_target if target else self.tokenize)(strings)
        return ids[..., :-1]

    def _each(self, function, strings, *args):
        strings = tf.convert_to_tensor(strings, tf.string)
        if strings.shape.rank == 0:
            return function(strings[tf.newaxis], *args)[0]
        return function(strings, *args)

    @property
    def language_codes(self):
        """`{code: id}` of a multilingual checkpoint's language codes (NLLB, M2M-100), else {}."""
        return dict(self.manifest.get("languages", {}).get("codes", {}))

    @property
    def languages(self):
        """`(source, target)` language codes chosen at import (`t2t-keras import --source-lang --target-lang`), or
        None for a checkpoint without language codes."""
        chosen = self.manifest.get("languages")
        return (chosen["source"], chosen["target"]) if chosen else None

    def language_id(self, code):
        """The id of language `code` (M2M-100's `en` also as `__en__`), or None where the checkpoint lacks it."""
        codes = self.language_codes
        return next((codes[name] for name in (code, f"__{code}__") if name in codes), None)

    def sentencepiece_model(self, side="source"):
        """The bytes of a side's SentencePiece model (`source.spm`, `target.spm`, `sentencepiece.bpe.model`)."""
        return self._files[self.manifest[side]["model"]]

    @property
    def skipped_ids(self):
        """The ids `detokenize` leaves out (the checkpoint tokenizer's special tokens), sorted."""
        return sorted(set(self.manifest["skipped_ids"]))

    @property
    def trailing_space(self):
        """Whether a text's final space is a piece of its own (transformers' fast NLLB tokenizer)."""
        return any(self.manifest[side].get("trailing_space") is not None for side in SIDES)

    def pieces(self, side="target"):
        """The pieces of a side's vocabulary in id order, as many as its embedding has rows; an id no piece has
        (M2M-100's made-up words) is named `madeupwordN`, as CTranslate2's converter names them."""
        size = self.vocab_size if side == "target" else self.source_vocab_size
        by_id = {index: piece for piece, index in (self._target if side == "target" else self._source).vocabulary
                 .items()}
        return [by_id.get(index, f"madeupword{index}") for index in range(size)]

    def language_ids(self, codes):
        """int32 ids of language codes (a tf.string tensor) in the graph, as `language_id` finds them; -1 for a code
        the checkpoint lacks."""
        if self._languages is None:
            return tf.fill(tf.shape(codes), -1)
        return tf.cast(self._languages.lookup(codes), tf.int32)

    def detokenize(self, ids):
        """Text of target `ids`, ragged `[batch, (ids)]` or dense `[batch, length]` (1-D: a scalar): everything
        from the first eos on and the special ids (the checkpoint tokenizer's special tokens) left out."""
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self.special_ids.pad)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank == 1:
            return self.detokenize(ids[tf.newaxis])[0]
        after_eos = tf.math.cumsum(tf.cast(tf.equal(ids, self.special_ids.eos), tf.int32), axis=1) > 0
        special = tf.reduce_any(tf.equal(ids[:, :, None], self._skipped[None, None, :]), axis=-1)
        kept = tf.ragged.boolean_mask(ids, ~(after_eos | special))
        pieces = tf.ragged.map_flat_values(self._pieces.lookup, tf.cast(kept, tf.int64))
        # As the checkpoints' tokenizers write text: the pieces joined, SentencePiece's word marks as spaces (a piece
        # its SentencePiece model lacks, such as a >>xx<< tag, stays as it is).
        text = tf.strings.regex_replace(tf.strings.reduce_join(pieces, axis=-1), WORD_MARK, " ")
        if self.manifest.get("strip", "both") == "leading":  # transformers' fast NLLB: the first word's space only
            return tf.strings.regex_replace(text, "^ ", "", replace_global=False)
        return tf.strings.strip(text)

    def id_to_piece(self, ids):
        """The target pieces (`tf.string`) of int ids, with the shape of `ids` ("" for an id without one)."""
        return self._pieces.lookup(tf.cast(ids, tf.int64))


def _language_table(codes):
    """A lookup of language codes, also by the name inside M2M-100's `__xx__`; None without codes."""
    if not codes:
        return None
    names = {**{code[2:-2]: i for code, i in codes.items() if code.startswith("__") and code.endswith("__")}, **codes}
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(list(names), tf.string), tf.constant(list(names.values()), tf.int64)), default_value=-1)


def _check_manifest(manifest, files):
    """Refuses an archive of another format or one missing a file its manifest names."""
    if manifest.get("format") != FORMAT:
        raise VocabularyError(f"The tokenizer archive has format {manifest.get('format')!r}; this version reads "
                              f"format {FORMAT}: import the checkpoint again with this version.")
    named = {manifest[side][key] for side in SIDES for key in ("model", "vocabulary")}
    missing = sorted(named - set(files))
    if missing:
        raise VocabularyError(f"The tokenizer archive lacks {missing}, which its manifest names: import the "
                              "checkpoint again.")


def archive_files(manifest, files):
    """`{name: bytes}` for `PretrainedTokenizer`: `files` and the manifest as JSON."""
    return {**files, MANIFEST: json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")}
