"""WordPiece (BERT's subwords): a vocabulary learned by TF-Text's tool, applied in-graph by FastWordpieceTokenizer.

Text is first split into words at whitespace and punctuation by BERT's basic
tokenizer (case kept, NFC-normalised); each punctuation mark or symbol is a
word of its own. TF-Text's WordPiece vocabulary tool
(`tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset`) learns the
pieces from the words of the training split with that same split, and
`FastWordpieceTokenizer` cuts every word into the longest pieces of the
vocabulary, a piece inside a word marked with "##" ("Fenster" -> "Fen",
"##ster").

Special ids are the fixed ones (`t2t_keras.special_ids`): the vocabulary
starts with "<pad>", "<unk>", "<s>", "</s>". The learned pieces follow, the
most frequent in the training text first (as SentencePiece orders them, and
as the adaptive softmax needs); "<unusedN>" pieces, which no text produces,
fill the vocabulary to exactly `vocab_size`.

Round trip. Unlike SentencePiece, WordPiece does not record whitespace:
`detokenize` joins the pieces of a word, puts one space between words, then
attaches closing punctuation (``. , ; : ! ? % ) ] }``) to the word before it,
opening brackets (``( [ {``) to the word after it, and rejoins "3 . 5" into
"3.5". So, for text whose words the vocabulary covers:

- the pieces survive: tokenize(detokenize(tokenize(text))) == tokenize(text);
- the text survives when it is NFC, its words are separated by single spaces
  and its punctuation follows those rules ("Klicken Sie auf OK (unten)."),
  but not otherwise: "don't" comes back as "don ' t", "E-Mail" as
  "E - Mail", and runs of whitespace as one space.

Unknown text: a word with a character the vocabulary lacks, or a word longer
than `MAX_BYTES_PER_WORD`, becomes one `UNK_ID` as a whole (detokenized as
"<unk>"); SentencePiece, by contrast, only replaces the unknown character.
"""

import collections
import logging
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset import bert_vocab_from_dataset

from t2t_keras.data.tokenizer import strip_special_ids
from t2t_keras.errors import DataError, VocabularyError
from t2t_keras.files import write_text_atomic
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
SUFFIX_INDICATOR = "##"
MAX_BYTES_PER_WORD = 100  # longer words become <unk>
# The word split, the same for learning the vocabulary and for tokenizing (the tool warns that a different
# split breaks the vocabulary).
PRETOKENIZER = dict(lower_case=False, normalization_form="NFC")
# Whitespace rules of `detokenize` (RE2 patterns, applied in order).
_DETOKENIZE_RULES = (
    (r" ([.,;:!?%)\]}])", r"\1"),  # "OK ." -> "OK."
    (r"([(\[{]) ", r"\1"),  # "( unten" -> "(unten"
    (r"(\d)([.,]) (\d)", r"\1\2\3"),  # "3. 5" -> "3.5"
)


def train_wordpiece(sentences: Iterable[str], vocab_path, vocab_size: int, *,
                    batch_size: int = 1024) -> "WordpieceTokenizer":
    """Learns a WordPiece vocabulary of `vocab_size` pieces from `sentences` and writes it to `vocab_path`.

    The learning is deterministic for the same sentences and size.

    Args:
      sentences: source and target sentences together (the vocabulary is shared).
      vocab_path: where to write the vocabulary, one piece a line (atomically).
      vocab_size: number of pieces, special tokens and "<unusedN>" padding included.
      batch_size: sentences split into words per step.

    Returns:
      The `WordpieceTokenizer`.

    Raises:
      DataError: there are no sentences, or `vocab_size` cannot hold the
        special pieces and every character (alone and as a "##" suffix).
    """
    sentences = list(sentences)
    if not sentences:
        raise DataError("No sentences to learn the WordPiece vocabulary from: check the training corpus.")
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string)).batch(batch_size)
    vocab = _by_frequency(_learned_vocab(dataset, vocab_size, len(sentences)), dataset)
    vocab += _unused_pieces(len(vocab), vocab_size)
    tokenizer = WordpieceTokenizer(vocab)
    tokenizer.save(vocab_path)
    logger.info("Learned a %d-piece WordPiece vocabulary on %d sentences: %s", vocab_size, len(sentences), vocab_path)
    return tokenizer


def _learned_vocab(dataset, vocab_size, num_sentences):
    """The special pieces, then those TF-Text's tool learns from `dataset` (batches of sentences).

    Raises DataError when they are more than `vocab_size`: every character of
    the text needs a piece alone and one as a "##" suffix.
    """
    learned = bert_vocab_from_dataset(dataset, vocab_size - len(SPECIAL_PIECES), reserved_tokens=[],
                                      bert_tokenizer_params=PRETOKENIZER)
    vocab = [SPECIAL_PIECES[i] for i in sorted(SPECIAL_PIECES)]
    vocab += [piece for piece in learned if piece not in vocab]
    if len(vocab) > vocab_size:
        raise DataError(
            f"vocab_size={vocab_size} is too small for WordPiece on {num_sentences} sentences: the learned "
            f"vocabulary has {len(vocab)} pieces (every character appears alone and as a '##' suffix). "
            f"Set data.vocab_size to {len(vocab)} or more."
        )
    return vocab


def _unused_pieces(num_pieces, vocab_size):
    """The "<unusedN>" pieces that fill a vocabulary of `num_pieces` to `vocab_size`, with a warning if many."""
    unused = vocab_size - num_pieces
    if unused > vocab_size // 20:
        logger.warning("The WordPiece vocabulary has %d pieces; %d unused ones fill it to data.vocab_size=%d "
                       "(more text or a smaller vocab_size would use them).", num_pieces, unused, vocab_size)
    return [f"<unused{i}>" for i in range(unused)]


class WordpieceTokenizer(tf.Module):
    """WordPiece tokenizer that runs in the TensorFlow graph (see the module docstring for its round trip).

    The same interface as the SentencePiece `Tokenizer`: int32 ids, no BOS or
    EOS added; held by another `tf.Module`, it is saved with it by
    `tf.saved_model.save`.

    Args:
      vocab: the pieces in id order, starting with "<pad>", "<unk>", "<s>", "</s>".
      name: name of the module.

    Example:

        tokenizer = WordpieceTokenizer.load("tokenizer.vocab")
        ids = tokenizer.tokenize(["Hello world."])  # RaggedTensor [1, (n)]
        tokenizer.detokenize(ids)                   # [b"Hello world."]
    """

    kind = "wordpiece"

    def __init__(self, vocab: Sequence[str], name=None):
        super().__init__(name=name)
        self._vocab = tuple(_checked_vocab(vocab))
        self._pretokenizer = BasicTokenizer(**PRETOKENIZER)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            list(self._vocab), suffix_indicator=SUFFIX_INDICATOR, max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32, unknown_token=SPECIAL_PIECES[UNK_ID], no_pretokenization=True,
            support_detokenization=True,
        )
        self._pieces = tf.constant(self._vocab, tf.string)

    @classmethod
    def load(cls, path) -> "WordpieceTokenizer":
        """Reads a vocabulary file, one piece a line."""
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            raise DataError(
                f"Tokenizer vocabulary {path} does not exist: train one first (train_wordpiece) or fix the path."
            ) from None
        return cls(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"))

    def save(self, path) -> None:
        """Writes the vocabulary to `path`, one piece a line, atomically."""
        write_text_atomic(path, "".join(piece + "\n" for piece in self._vocab))

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special tokens included."""
        return len(self._vocab)

    @property
    def vocab(self):
        """The pieces in id order."""
        return self._vocab

    def tokenize(self, strings):
        """Ids of `strings`: int32 `RaggedTensor` `[batch, (tokens)]`, or a 1-D tensor for a scalar."""
        strings = tf.convert_to_tensor(strings, tf.string)
        if strings.shape.rank == 0:
            return self.tokenize(strings[tf.newaxis])[0]
        words = self._pretokenizer.tokenize(strings)  # (batch, (words))
        return self._wordpiece.tokenize(words).merge_dims(1, 2)  # (batch, (words), (pieces)) -> (batch, (pieces))

    def detokenize(self, ids):
        """Text of ids, ragged `[batch, (tokens)]` or dense padded `[batch, length]`; a 1-D input gives a scalar.

        Everything from the first EOS on is ignored and pad/bos/eos ids are
        removed, so decoder outputs can be passed as they are.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank == 1:
            return self.detokenize(ids[tf.newaxis])[0]
        text = self._wordpiece.detokenize(strip_special_ids(ids))  # (batch,)
        for pattern, rewrite in _DETOKENIZE_RULES:
            text = tf.strings.regex_replace(text, pattern, rewrite)
        return text

    def id_to_piece(self, ids):
        """The pieces (`tf.string`) of int ids, with the same shape as `ids`."""
        return tf.gather(self._pieces, ids)


def _by_frequency(vocab, dataset):
    """`vocab` with the learned pieces in order of their use in `dataset` (batches of sentences), most used first."""
    tokenizer = WordpieceTokenizer(vocab)
    counts = np.zeros(len(vocab), np.int64)
    for batch in dataset:
        counts += np.bincount(tokenizer.tokenize(batch).flat_values.numpy(), minlength=len(vocab))
    first = len(SPECIAL_PIECES)
    order = sorted(range(first, len(vocab)), key=lambda i: (-counts[i], i))  # stable: the tool's order on ties
    return vocab[:first] + [vocab[i] for i in order]


def _checked_vocab(vocab):
    """The pieces, after checking the special ones lead and no piece is empty or repeated."""
    vocab = list(vocab)
    found = tuple(vocab[:len(SPECIAL_PIECES)])
    expected = tuple(SPECIAL_PIECES[i] for i in sorted(SPECIAL_PIECES))
    if found != expected:
        raise VocabularyError(f"The WordPiece vocabulary starts with {found}, expected {expected} (pad/unk/bos/eos "
                              "ids 0-3): learn it with train_wordpiece.")
    repeated = sorted(piece for piece, count in collections.Counter(vocab).items() if count > 1)
    if repeated or "" in vocab:
        raise VocabularyError(f"The WordPiece vocabulary has repeated or empty pieces {repeated[:5]}: learn it again "
                              "with train_wordpiece.")
    return vocab
