"""Shared source–target SentencePiece vocabulary (BPE or unigram): training and an in-graph tokenizer.

The paper (section 5.1) encodes English–German with byte-pair encoding and a
shared source–target vocabulary of about 37,000 tokens. Here SentencePiece
learns the BPE merges (or a unigram language model, Kudo 2018) in Python;
``Tokenizer`` runs them in the TensorFlow graph through ``tensorflow_text``, so
it works inside ``tf.data``, ``tf.function`` and exported SavedModels.
SentencePiece keeps whitespace as a piece, so detokenize(tokenize(text)) gives
the text back for every text whose characters the vocabulary covers.

Special ids are fixed (`t2t_keras.special_ids`): pad=0, unk=1, bos=2, eos=3.
"""

import hashlib
import io
import logging
import re
from typing import Iterable, Iterator

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2
from tensorflow.python.trackable import resource as trackable_resource
from tensorflow_text.python.ops import sentencepiece_tokenizer as tf_text_sentencepiece

from t2t_keras.errors import DataError, VocabularyError
from t2t_keras.files import write_bytes_atomic
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

_MAX_VOCAB_PATTERN = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
MODEL_TYPES = ("bpe", "unigram")  # SentencePiece's algorithms that t2t_keras trains (data.tokenizer)
_MODEL_TYPE_NAMES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}  # TrainerSpec.ModelType


def train_sentencepiece(sentences: Iterable[str], model_path, vocab_size: int, *, character_coverage: float = 1.0,
                        input_sentence_size: int = 2_000_000, seed: int = 0, num_threads: int = 1,
                        model_type: str = "bpe") -> "Tokenizer":
    """Trains a SentencePiece model on ``sentences`` and writes it to ``model_path``.

    Training is deterministic for the same sentences, arguments and seed.

    Args:
      sentences: source and target sentences together (the vocabulary is shared).
      model_path: where to write the ``.model`` file (atomically).
      vocab_size: number of pieces, special tokens included.
      character_coverage: share of characters the vocabulary must cover; 1.0
        keeps every character seen.
      input_sentence_size: at most this many sentences, sampled with ``seed``,
        are used for training.
      seed: seed of SentencePiece's sentence sampling.
      num_threads: trainer threads. The learned merges depend on it, so keep it
        fixed to reproduce a vocabulary.
      model_type: "bpe" (byte-pair encoding, the paper's) or "unigram".

    Returns:
      The trained ``Tokenizer``.

    Raises:
      DataError: there are no sentences, or ``vocab_size`` is larger than the
        data supports.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}. Received: model_type={model_type!r}")
    counter = _CountingIterator(sentences)
    model_bytes = _trained_model_bytes(counter, vocab_size, model_type, seed, character_coverage,
                                       input_sentence_size, num_threads)
    write_bytes_atomic(model_path, model_bytes)
    logger.info("Trained a %d-piece %s model on %d sentences: %s", vocab_size, model_type, counter.count,
                model_path)
    return Tokenizer(model_bytes)


def _trained_model_bytes(counter, vocab_size, model_type, seed, character_coverage, input_sentence_size,
                         num_threads):
    """The serialized SentencePiece model learned from `counter`'s sentences, with our special ids.

    The arguments are those of `train_sentencepiece`; SentencePiece samples
    `input_sentence_size` of the sentences with `seed`. Its refusals (no
    sentences, too large a vocabulary) come back as `DataError`, see
    `_training_error`.
    """
    writer = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=counter,
            model_writer=writer,
            model_type=model_type,
            vocab_size=vocab_size,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            character_coverage=character_coverage,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=num_threads,
            minloglevel=2,
        )
    except RuntimeError as err:
        raise _training_error(err, counter.count, vocab_size) from None
    return writer.getvalue()


def check_vocab_size(tokenizer_vocab_size: int, model_vocab_size: int) -> None:
    """Raises VocabularyError unless the tokenizer and the model agree on the vocabulary size."""
    if int(tokenizer_vocab_size) != int(model_vocab_size):
        raise VocabularyError(
            f"The tokenizer has {tokenizer_vocab_size} pieces but the model expects a "
            f"vocabulary of {model_vocab_size}: retrain the tokenizer with "
            f"data.vocab_size={model_vocab_size}, or rebuild the model with "
            f"vocab_size={tokenizer_vocab_size}."
        )


class Tokenizer(tf.Module):
    """SentencePiece (BPE or unigram) tokenizer that runs in the TensorFlow graph.

    Ids are int32; no BOS or EOS is added (the input pipeline adds them).
    Held by another ``tf.Module``, it is saved with it by ``tf.saved_model.save``.

    Args:
      model_bytes: the serialized SentencePiece model (contents of a ``.model`` file).
      name: name of the module.

    Example:

        tokenizer = Tokenizer.load("vocab.model")
        ids = tokenizer.tokenize(["Hello world."])  # RaggedTensor [1, (n)]
        tokenizer.detokenize(ids)                   # [b"Hello world."]
    """

    def __init__(self, model_bytes: bytes, name=None):
        super().__init__(name=name)
        model_bytes = bytes(model_bytes)
        self._vocab_size = _checked_vocab_size(model_bytes)
        self._kind = _model_type(model_bytes)
        self._model_bytes = model_bytes
        self._sentencepiece = tf_text.SentencepieceTokenizer(
            model=model_bytes, out_type=tf.int32, add_bos=False, add_eos=False
        )
        # tf_text keeps the model in a resource owned by the op kernel, which is
        # deleted whenever TensorFlow clears its kernel cache: tf.random.set_seed,
        # keras.utils.set_random_seed and keras.backend.clear_session all do, and
        # the tokenizer then fails with "Resource ... does not exist". A resource
        # with a shared name lives in the resource manager instead.
        self._sentencepiece._model_resource = _SharedModelResource(model_bytes)

    @classmethod
    def load(cls, path) -> "Tokenizer":
        """Reads a SentencePiece ``.model`` file."""
        try:
            with open(path, "rb") as handle:
                return cls(handle.read())
        except FileNotFoundError:
            raise DataError(
                f"Tokenizer model {path} does not exist: train one first "
                "(train_sentencepiece) or fix the path."
            ) from None

    def save(self, path) -> None:
        """Writes the SentencePiece model to ``path`` atomically."""
        write_bytes_atomic(path, self._model_bytes)

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special tokens included."""
        return self._vocab_size

    @property
    def kind(self) -> str:
        """The SentencePiece algorithm, "bpe" or "unigram" (the `data.tokenizer` it was trained for)."""
        return self._kind

    @property
    def model_bytes(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._model_bytes

    def tokenize(self, strings):
        """Ids of ``strings``.

        Args:
          strings: ``tf.string`` of shape ``[batch]`` (or a scalar).

        Returns:
          int32 ``tf.RaggedTensor`` of shape ``[batch, (tokens)]``; for a scalar
          input, a 1-D int32 tensor.
        """
        return self._sentencepiece.tokenize(tf.convert_to_tensor(strings, tf.string))

    def detokenize(self, ids):
        """Text of ``ids``, ragged ``[batch, (tokens)]`` or dense padded ``[batch, length]``.

        Everything from the first EOS on is ignored, and pad/bos/eos ids are
        removed, so decoder outputs can be passed as they are. A 1-D input gives
        a scalar string.

        Returns:
          ``tf.string`` of shape ``[batch]`` (or a scalar).
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank == 1:
            return self.detokenize(ids[tf.newaxis])[0]
        return self._sentencepiece.detokenize(strip_special_ids(ids))

    def id_to_piece(self, ids):
        """The pieces (``tf.string``) of int ids, with the same shape as ``ids``."""
        return self._sentencepiece.id_to_string(ids)


class _SharedModelResource(trackable_resource.TrackableResource):
    """A SentencePiece model resource named after the model's hash, so it outlives kernel caches."""

    def __init__(self, model_bytes: bytes):
        super().__init__()
        self._model = model_bytes
        self._shared_name = "t2t_keras_sentencepiece_" + hashlib.sha256(model_bytes).hexdigest()
        _ = self.resource_handle  # Creates the resource now, outside any tf.function.

    def _create_resource(self):
        return tf_text_sentencepiece.gen_sentencepiece_tokenizer.sentencepiece_op(
            model=self._model, shared_name=self._shared_name
        )


def strip_special_ids(ids):
    """Ragged ids of dense int32 `ids` without pad/bos/eos and without anything from the first EOS on."""
    # (batch, length): True from the first EOS to the end of each row.
    after_eos = tf.math.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1) > 0
    is_special = tf.equal(ids, PAD_ID) | tf.equal(ids, BOS_ID)
    return tf.ragged.boolean_mask(ids, ~(after_eos | is_special))


def _checked_vocab_size(model_bytes: bytes) -> int:
    """Vocabulary size of a SentencePiece model, after checking its special ids."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_bytes)
    except RuntimeError as err:
        raise VocabularyError(f"Not a SentencePiece model ({err}): load a .model file.") from None
    found = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise VocabularyError(
            f"The SentencePiece model has pad/unk/bos/eos ids {found}, expected "
            f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}: retrain it with train_sentencepiece."
        )
    return processor.get_piece_size()


def _model_type(model_bytes: bytes) -> str:
    """The algorithm a SentencePiece model was trained with: "bpe", "unigram", "word" or "char"."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_bytes)
    return _MODEL_TYPE_NAMES.get(proto.trainer_spec.model_type, "unknown")


def _training_error(err: RuntimeError, num_sentences: int, vocab_size: int) -> DataError:
    """A DataError explaining why SentencePiece training failed."""
    if num_sentences == 0:
        return DataError("No sentences to train the tokenizer on: check the training corpus.")
    match = _MAX_VOCAB_PATTERN.search(str(err))
    if match:
        maximum = int(match.group(2))
        return DataError(
            f"vocab_size={vocab_size} is too large for {num_sentences} training "
            f"sentences: SentencePiece can learn at most {maximum} pieces from them. "
            f"Set data.vocab_size to {maximum} or less, or train on more text."
        )
    return DataError(f"SentencePiece training on {num_sentences} sentences failed: {err}")


class _CountingIterator(Iterator[str]):
    """Passes sentences through to SentencePiece, counting them."""

    def __init__(self, sentences: Iterable[str]):
        self._sentences = iter(sentences)
        self.count = 0

    def __next__(self) -> str:
        sentence = next(self._sentences)
        self.count += 1
        return sentence
