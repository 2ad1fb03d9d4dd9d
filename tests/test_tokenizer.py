"""Tests of t2t_keras.data.tokenizer: SentencePiece BPE training and the in-graph Tokenizer."""

import io
import os
import random
import tempfile

import keras
import sentencepiece as spm
import tensorflow as tf

from t2t_keras.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    check_vocab_size,
    train_sentencepiece,
)
from t2t_keras.errors import DataError, VocabularyError
from tests.helpers import TestCase, TokenizerHolder

VOCAB_SIZE = 200

_ENGLISH = "the a green small house cat dog tree runs sleeps quickly under over big old new".split()
_GERMAN = "der die das grüne kleine Haus Katze Hund Baum läuft schläft schnell unter über große Straße".split()


def synthetic_corpus(num_pairs=300, seed=0):
    """Deterministic English-like and German-like sentence pairs."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(num_pairs):
        length = rng.randint(2, 12)
        english = " ".join(rng.choice(_ENGLISH) for _ in range(length)).capitalize() + "."
        german = " ".join(rng.choice(_GERMAN) for _ in range(length + rng.randint(-1, 2))) + "."
        pairs.append((english, german.capitalize()))
    return pairs


def train_test_tokenizer(model_path, vocab_size=VOCAB_SIZE, pairs=None):
    """Trains the shared vocabulary on both sides of the synthetic corpus."""
    pairs = pairs or synthetic_corpus()
    sentences = [side for pair in pairs for side in pair]
    return train_sentencepiece(sentences, model_path, vocab_size, seed=1)


class TokenizerTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.model_path = os.path.join(cls._tmp.name, "vocab.model")
        cls.pairs = synthetic_corpus()
        cls.sentences = [side for pair in cls.pairs for side in pair]
        cls.tokenizer = train_test_tokenizer(cls.model_path, pairs=cls.pairs)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def test_special_ids_and_vocab_size(self):
        pieces = self.tokenizer.id_to_piece(tf.constant([PAD_ID, UNK_ID, BOS_ID, EOS_ID]))
        self.assertAllEqual(pieces, [b"<pad>", b"<unk>", b"<s>", b"</s>"])
        self.assertEqual((PAD_ID, UNK_ID, BOS_ID, EOS_ID), (0, 1, 2, 3))
        self.assertIsInstance(self.tokenizer.vocab_size, int)
        self.assertEqual(self.tokenizer.vocab_size, VOCAB_SIZE)

    def test_tokenize_adds_no_special_ids(self):
        ids = self.tokenizer.tokenize(self.sentences)
        self.assertIsInstance(ids, tf.RaggedTensor)
        self.assertEqual(ids.dtype, tf.int32)
        self.assertEqual(ids.nrows(), len(self.sentences))
        self.assertAllGreaterEqual(ids.flat_values, 4)
        self.assertAllLess(ids.flat_values, VOCAB_SIZE)

    def test_round_trip(self):
        ids = self.tokenizer.tokenize(self.sentences)
        texts = [t.decode("utf-8") for t in self.tokenizer.detokenize(ids).numpy()]
        self.assertEqual(texts, self.sentences)

    def test_detokenize_dense_ignores_special_ids_and_text_after_eos(self):
        sentence = self.pairs[0][1]
        ids = self.tokenizer.tokenize([sentence])[0].numpy().tolist()
        other = self.tokenizer.tokenize(["Die Katze."])[0].numpy().tolist()
        dense = tf.constant([
            [BOS_ID] + ids + [EOS_ID] + other + [PAD_ID, PAD_ID],
            other + [EOS_ID] + [PAD_ID] * (len(ids) + 3),
        ])
        self.assertAllEqual(
            self.tokenizer.detokenize(dense), [sentence.encode(), b"Die Katze."]
        )
        # The same ids as a RaggedTensor, and a single 1-D sequence.
        ragged = tf.RaggedTensor.from_tensor(dense, padding=PAD_ID)
        self.assertAllEqual(self.tokenizer.detokenize(ragged), [sentence.encode(), b"Die Katze."])
        self.assertEqual(self.tokenizer.detokenize(dense[1]).numpy(), b"Die Katze.")

    def test_in_tf_function(self):
        @tf.function
        def round_trip(strings):
            return self.tokenizer.detokenize(self.tokenizer.tokenize(strings))

        strings = tf.constant(self.sentences[:8])
        self.assertAllEqual(round_trip(strings), strings)

    def test_in_tf_data(self):
        ds = tf.data.Dataset.from_tensor_slices(self.sentences[:16]).map(
            self.tokenizer.tokenize, num_parallel_calls=tf.data.AUTOTUNE
        )
        expected = self.tokenizer.tokenize(self.sentences[:16])
        for got, want in zip(ds, expected):
            self.assertEqual(got.dtype, tf.int32)
            self.assertAllEqual(got, want)

    def test_survives_kernel_cache_clears(self):
        expected = self.tokenizer.tokenize(self.sentences[:4])
        tf.random.set_seed(0)
        keras.utils.set_random_seed(0)
        keras.backend.clear_session()
        self.assertAllEqual(self.tokenizer.tokenize(self.sentences[:4]), expected)

    def test_saved_model_round_trip(self):
        export_dir = os.path.join(self.get_temp_dir(), "holder")
        tf.saved_model.save(TokenizerHolder(self.tokenizer), export_dir)
        restored = tf.saved_model.load(export_dir)
        strings = tf.constant(self.sentences[:10])
        ids = restored.tokenize(strings)
        self.assertAllEqual(ids, self.tokenizer.tokenize(strings))
        self.assertAllEqual(restored.detokenize(ids.to_tensor()), strings)

    def test_load_and_save(self):
        loaded = Tokenizer.load(self.model_path)
        self.assertEqual(loaded.vocab_size, VOCAB_SIZE)
        with open(self.model_path, "rb") as handle:
            self.assertEqual(loaded.model_bytes, handle.read())
        copy_path = os.path.join(self.get_temp_dir(), "copy.model")
        loaded.save(copy_path)
        self.assertEqual(Tokenizer.load(copy_path).model_bytes, loaded.model_bytes)

    def test_load_missing_file(self):
        with self.assertRaisesRegex(DataError, "missing.model does not exist"):
            Tokenizer.load(os.path.join(self.get_temp_dir(), "missing.model"))


class TrainSentencepieceTest(TestCase):
    def test_training_is_deterministic(self):
        tmp = self.get_temp_dir()
        first = train_test_tokenizer(os.path.join(tmp, "first.model"))
        second = train_test_tokenizer(os.path.join(tmp, "second.model"))
        self.assertEqual(first.model_bytes, second.model_bytes)

    def test_vocab_too_large_reports_maximum(self):
        path = os.path.join(self.get_temp_dir(), "too_big.model")
        with self.assertRaises(DataError) as context:
            train_test_tokenizer(path, vocab_size=50_000)
        message = str(context.exception)
        self.assertIn("vocab_size=50000", message)
        self.assertRegex(message, r"at most \d+ pieces")
        self.assertIn("data.vocab_size", message)
        self.assertFalse(os.path.exists(path))

    def test_no_sentences(self):
        with self.assertRaisesRegex(DataError, "No sentences"):
            train_sentencepiece([], os.path.join(self.get_temp_dir(), "empty.model"), 100)

    def test_model_with_other_special_ids_is_refused(self):
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(  # SentencePiece's defaults: unk=0, bos=1, eos=2, no pad.
            sentence_iterator=iter([s for pair in synthetic_corpus() for s in pair]),
            model_writer=writer, model_type="bpe", vocab_size=100, minloglevel=2,
        )
        with self.assertRaisesRegex(VocabularyError, r"pad/unk/bos/eos ids \(-1, 0, 1, 2\)"):
            Tokenizer(writer.getvalue())


class CheckVocabSizeTest(TestCase):
    def test_equal_sizes_pass(self):
        check_vocab_size(37000, 37000)

    def test_mismatch_names_both_sizes_and_the_fix(self):
        with self.assertRaises(VocabularyError) as context:
            check_vocab_size(8000, 37000)
        message = str(context.exception)
        self.assertIn("8000", message)
        self.assertIn("37000", message)
        self.assertIn("data.vocab_size=37000", message)
        self.assertIn("rebuild the model", message)


if __name__ == "__main__":
    tf.test.main()
