"""The tokenizers of `data.tokenizer` behind one interface: training, files, loading.

    bpe        SentencePiece byte-pair encoding (the paper's, §5.1)   data/tokenizer.py   tokenizer.model
    unigram    SentencePiece unigram language model (Kudo, 2018)      data/tokenizer.py   tokenizer.model
    wordpiece  BERT's WordPiece, TF-Text's vocabulary tool            data/wordpiece.py   tokenizer.vocab
    pretrained an imported checkpoint's SentencePiece models and ids  data/pretrained_tokenizer.py
                                                                                           tokenizer.zip

Every tokenizer runs in the TensorFlow graph (tf.data, tf.function,
SavedModels) and has the same members: `kind`, `vocab_size`,
`tokenize(strings) -> int32 RaggedTensor`, `detokenize(ids) -> strings`,
`id_to_piece(ids)`, `save(path)`; special ids are fixed (`special_ids`), except an
imported checkpoint's, which are its own (`PretrainedTokenizer.special_ids`) and
which its `tokenize` adds as the checkpoint expects (its eos, NLLB's language code).
The file name tells a saved tokenizer's scheme family; the SentencePiece model
itself records whether it is BPE or unigram.
"""

import pathlib

from t2t_keras.config import TOKENIZER_CHOICES
from t2t_keras.data.pretrained_tokenizer import PretrainedTokenizer
from t2t_keras.data.tokenizer import Tokenizer, train_sentencepiece
from t2t_keras.data.wordpiece import WordpieceTokenizer, train_wordpiece
from t2t_keras.errors import ConfigError, DataError, VocabularyError

SENTENCEPIECE_FILE = "tokenizer.model"
WORDPIECE_FILE = "tokenizer.vocab"
PRETRAINED_FILE = "tokenizer.zip"
FILENAMES = {"bpe": SENTENCEPIECE_FILE, "unigram": SENTENCEPIECE_FILE, "wordpiece": WORDPIECE_FILE,
             "pretrained": PRETRAINED_FILE}
LOADERS = {".vocab": WordpieceTokenizer.load, ".zip": PretrainedTokenizer.load}  # by suffix; else SentencePiece


def _check_kind(kind):
    if kind not in TOKENIZER_CHOICES:
        raise ConfigError(f"data.tokenizer must be one of {list(TOKENIZER_CHOICES)}. Received: tokenizer={kind!r}")


def tokenizer_filename(kind):
    """The file a tokenizer of `kind` is saved in, inside a run directory or an export."""
    _check_kind(kind)
    return FILENAMES[kind]


def train_tokenizer(kind, sentences, path, vocab_size, seed=0):
    """Trains a tokenizer of `kind` ("bpe", "unigram" or "wordpiece") on `sentences`, saved at `path`."""
    _check_kind(kind)
    if kind == "pretrained":
        raise ConfigError("data.tokenizer=pretrained is the tokenizer of an imported checkpoint, which is not "
                          "trained here: import the checkpoint (t2t-keras import) and start from that run "
                          "(train --init-from), or choose data.tokenizer bpe, unigram or wordpiece.")
    if kind == "wordpiece":
        return train_wordpiece(sentences, path, vocab_size)
    return train_sentencepiece(sentences, path, vocab_size, seed=seed, model_type=kind)


def load_tokenizer(path, kind=None):
    """The tokenizer saved at `path` (`*.vocab`: WordPiece, `*.zip`: an imported checkpoint's, else SentencePiece),
    checked to be `kind` if given."""
    path = pathlib.Path(path)
    tokenizer = LOADERS.get(path.suffix, Tokenizer.load)(path)
    if kind is not None:
        check_tokenizer_kind(tokenizer, kind, path)
    return tokenizer


def find_tokenizer(directory):
    """The tokenizer file in `directory` (a run's or an export's `assets.extra/`)."""
    directory = pathlib.Path(directory)
    for name in (SENTENCEPIECE_FILE, WORDPIECE_FILE, PRETRAINED_FILE):
        if (directory / name).exists():
            return directory / name
    raise DataError(f"{directory} holds no tokenizer ({SENTENCEPIECE_FILE}, {WORDPIECE_FILE} or {PRETRAINED_FILE}): "
                    "export or train again, or copy the run's tokenizer there.")


def check_tokenizer_kind(tokenizer, kind, path="the tokenizer"):
    """Raises VocabularyError unless `tokenizer` is of the configured `kind`."""
    _check_kind(kind)
    if tokenizer.kind != kind:
        raise VocabularyError(f"{path} is a {tokenizer.kind} tokenizer but data.tokenizer is {kind!r}: use the run's "
                              f"own config, or train into a new run directory for data.tokenizer={kind}.")
