"""The tokenizers of `data.tokenizer` (bpe, unigram, wordpiece) behind one interface: the same ids in the graph
and in Python, the round trip each promises, SavedModels, files and kinds, WordPiece's unknown words."""

import pathlib
import tempfile

import keras
import tensorflow as tf

from t2t_keras.config import from_dict, load_config
from t2t_keras.data.tokenizers import (
    find_tokenizer,
    load_tokenizer,
    tokenizer_filename,
    train_tokenizer,
)
from t2t_keras.data.wordpiece import MAX_BYTES_PER_WORD, WordpieceTokenizer, train_wordpiece
from t2t_keras.errors import ConfigError, DataError, VocabularyError
from t2t_keras.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tests.helpers import TestCase, TokenizerHolder
from tests.test_tokenizer import synthetic_corpus

KINDS = ("bpe", "unigram", "wordpiece")
VOCAB_SIZE = 120  # within what the test corpus supports for every scheme (WordPiece needs at least 113 pieces)
# Text beyond the training corpus's style: brackets, digits, an apostrophe, a hyphen, double spaces.
UNUSUAL = ["Der Hund (klein) läuft, 3.5 Mal!", "don't  stop: the e-mail", "Straße über  Baum."]


def texts(strings):
    return [s.decode("utf-8") for s in strings.numpy()]


class TokenizerSchemesTest(TestCase):
    """Every scheme, trained on the same synthetic English/German corpus."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.dir = pathlib.Path(cls._tmp.name)
        pairs = synthetic_corpus()
        cls.sentences = [side for pair in pairs for side in pair]
        cls.training = cls.sentences + UNUSUAL  # every character of the tests is known (WordpieceTest: unknown ones)
        cls.tokenizers = {kind: train_tokenizer(kind, cls.training, cls.dir / f"{kind}-{tokenizer_filename(kind)}",
                                                VOCAB_SIZE, seed=1) for kind in KINDS}

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def each(self):
        for kind, tokenizer in self.tokenizers.items():
            with self.subTest(kind=kind):
                yield kind, tokenizer

    def test_fixed_special_ids_size_and_kind(self):
        for kind, tokenizer in self.each():
            pieces = tokenizer.id_to_piece(tf.constant([PAD_ID, UNK_ID, BOS_ID, EOS_ID]))
            self.assertAllEqual(pieces, [b"<pad>", b"<unk>", b"<s>", b"</s>"])
            self.assertEqual((tokenizer.kind, tokenizer.vocab_size), (kind, VOCAB_SIZE))
            ids = tokenizer.tokenize(self.sentences)
            self.assertEqual(ids.dtype, tf.int32)
            self.assertAllGreaterEqual(ids.flat_values, UNK_ID)  # never pad, bos or eos
            self.assertNotIn(BOS_ID, ids.flat_values.numpy())
            self.assertNotIn(EOS_ID, ids.flat_values.numpy())
            self.assertAllLess(ids.flat_values, VOCAB_SIZE)

    def test_schemes_split_differently(self):
        ids = {kind: tuple(map(tuple, t.tokenize(self.sentences[:50]).to_list())) for kind, t in self.each()}
        self.assertEqual(len(set(ids.values())), len(KINDS))

    def test_sentencepiece_round_trip_is_exact(self):
        for kind in ("bpe", "unigram"):
            with self.subTest(kind=kind):
                tokenizer = self.tokenizers[kind]
                self.assertEqual(texts(tokenizer.detokenize(tokenizer.tokenize(self.sentences))), self.sentences)

    def test_wordpiece_round_trip_keeps_the_pieces_and_text_in_the_normal_form(self):
        tokenizer = self.tokenizers["wordpiece"]
        # The corpus writes "Word word word." (single spaces, the full stop attached): text comes back exactly.
        self.assertEqual(texts(tokenizer.detokenize(tokenizer.tokenize(self.sentences))), self.sentences)
        # Other text comes back with its pieces; only whitespace around punctuation may change.
        ids = tokenizer.tokenize(UNUSUAL)
        again = tokenizer.detokenize(ids)
        self.assertAllEqual(tokenizer.tokenize(again), ids)
        for original, text in zip(UNUSUAL, texts(again)):
            self.assertEqual(text.replace(" ", ""), original.replace(" ", ""))
        self.assertEqual(texts(again)[1], "don ' t stop: the e - mail")  # the documented changes

    def test_same_ids_in_tf_function_tf_data_and_eager(self):
        strings = self.sentences[:16] + UNUSUAL
        for kind, tokenizer in self.each():
            eager = tokenizer.tokenize(strings)
            graph = tf.function(tokenizer.tokenize)(tf.constant(strings))
            self.assertAllEqual(graph, eager)
            # tf.data maps over one sentence at a time (a scalar), as the input pipeline does.
            mapped = tf.data.Dataset.from_tensor_slices(strings).map(tokenizer.tokenize)
            for got, want in zip(mapped, eager):
                self.assertAllEqual(got, want)
            self.assertAllEqual(tokenizer.tokenize(strings[0]), eager[0])
            detokenized = tf.function(tokenizer.detokenize)(eager.to_tensor())
            self.assertAllEqual(detokenized, tokenizer.detokenize(eager))

    def test_detokenize_stops_at_eos_and_drops_special_ids(self):
        for _, tokenizer in self.each():
            first, second = tokenizer.tokenize(self.sentences[:2]).to_list()
            dense = tf.constant([[BOS_ID] + first + [EOS_ID] + second, second + [EOS_ID] + [PAD_ID] * (len(first) + 1)])
            expected = tokenizer.detokenize(tf.ragged.constant([first, second]))
            self.assertAllEqual(tokenizer.detokenize(dense), expected)
            self.assertEqual(tokenizer.detokenize(dense[1]).numpy(), expected[1].numpy())

    def test_saved_model_round_trip(self):
        strings = tf.constant(self.sentences[:6] + UNUSUAL)
        for kind, tokenizer in self.each():
            export_dir = str(self.dir / f"holder-{kind}")
            tf.saved_model.save(TokenizerHolder(tokenizer), export_dir)
            restored = tf.saved_model.load(export_dir)
            ids = restored.tokenize(strings)
            self.assertAllEqual(ids, tokenizer.tokenize(strings))
            self.assertAllEqual(restored.detokenize(ids.to_tensor()), tokenizer.detokenize(ids))

    def test_survives_kernel_cache_clears(self):
        for _, tokenizer in self.each():
            expected = tokenizer.tokenize(self.sentences[:4])
            tf.random.set_seed(0)
            keras.utils.set_random_seed(0)
            keras.backend.clear_session()
            self.assertAllEqual(tokenizer.tokenize(self.sentences[:4]), expected)

    def test_saved_file_loads_as_the_same_kind_and_ids(self):
        for kind, tokenizer in self.each():
            path = self.dir / "copies" / kind / tokenizer_filename(kind)
            path.parent.mkdir(parents=True)
            tokenizer.save(path)
            self.assertEqual(find_tokenizer(path.parent), path)
            loaded = load_tokenizer(path, kind)
            self.assertEqual((loaded.kind, loaded.vocab_size), (kind, VOCAB_SIZE))
            self.assertAllEqual(loaded.tokenize(UNUSUAL), tokenizer.tokenize(UNUSUAL))
        with self.assertRaisesRegex(VocabularyError, "is a bpe tokenizer but data.tokenizer is 'unigram'"):
            load_tokenizer(self.dir / "copies" / "bpe" / "tokenizer.model", "unigram")
        with self.assertRaisesRegex(DataError, "holds no tokenizer"):
            find_tokenizer(self.dir / "copies")

    def test_wordpiece_learning_is_deterministic(self):
        again = train_wordpiece(self.training, self.dir / "again.vocab", VOCAB_SIZE)
        self.assertEqual(again.vocab, self.tokenizers["wordpiece"].vocab)


class WordpieceTest(TestCase):
    """Unknown words, the padded vocabulary and the errors of the WordPiece scheme."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.dir = pathlib.Path(cls._tmp.name)
        cls.sentences = [side for pair in synthetic_corpus() for side in pair]
        cls.tokenizer = train_wordpiece(cls.sentences, cls.dir / "tokenizer.vocab", 150)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def ids(self, text):
        return self.tokenizer.tokenize(text).numpy().tolist()

    def test_a_word_with_an_unseen_character_is_one_unknown_token(self):
        self.assertFalse({"j", "x", "\u263a"} & set("".join(self.sentences)))
        for unknown in ("jjj", "Hundx", "\u263a"):
            with self.subTest(word=unknown):
                self.assertEqual(self.ids(f"Der {unknown} Hund."), self.ids("Der") + [UNK_ID] + self.ids("Hund."))
        self.assertEqual(self.tokenizer.detokenize(self.tokenizer.tokenize(["Der jjj Hund."])).numpy().tolist(),
                         [b"Der <unk> Hund."])

    def test_an_overlong_word_is_one_unknown_token(self):
        fits, overlong = "a" * MAX_BYTES_PER_WORD, "a" * (MAX_BYTES_PER_WORD + 1)
        self.assertNotIn(UNK_ID, self.ids(fits))
        self.assertEqual(self.ids(overlong), [UNK_ID])

    def test_vocabulary_is_padded_with_pieces_no_text_produces(self):
        vocab = self.tokenizer.vocab
        self.assertEqual(len(vocab), 150)
        unused = [i for i, piece in enumerate(vocab) if piece.startswith("<unused")]
        self.assertGreater(len(unused), 0)  # the corpus gives fewer than 150 pieces
        self.assertEqual(unused, list(range(150 - len(unused), 150)))  # at the end
        produced = set(self.tokenizer.tokenize(self.sentences + [" ".join(vocab)]).flat_values.numpy())
        self.assertEqual(produced & set(unused), set())
        self.assertTrue(any(piece.startswith("##") for piece in vocab))

    def test_learned_pieces_are_numbered_by_frequency(self):
        ids = self.tokenizer.tokenize(self.sentences).flat_values.numpy()
        counts = [int((ids == i).sum()) for i in range(4, 150)]
        self.assertEqual(counts, sorted(counts, reverse=True))
        self.assertGreater(counts[0], counts[-1])

    def test_too_small_vocabulary_names_the_size_it_needs(self):
        with self.assertRaisesRegex(DataError, r"vocab_size=40 is too small .* Set data.vocab_size to \d+ or more"):
            train_wordpiece(self.sentences, self.dir / "small.vocab", 40)
        self.assertFalse((self.dir / "small.vocab").exists())
        with self.assertRaisesRegex(DataError, "No sentences"):
            train_wordpiece([], self.dir / "empty.vocab", 100)

    def test_vocabulary_without_the_special_pieces_first_is_refused(self):
        with self.assertRaisesRegex(VocabularyError, "expected \\('<pad>', '<unk>', '<s>', '</s>'\\)"):
            WordpieceTokenizer(["[PAD]", "[UNK]", "<s>", "</s>", "a"])
        with self.assertRaisesRegex(VocabularyError, "repeated or empty pieces \\['a'\\]"):
            WordpieceTokenizer(["<pad>", "<unk>", "<s>", "</s>", "a", "a"])
        with self.assertRaisesRegex(DataError, "missing.vocab does not exist"):
            WordpieceTokenizer.load(self.dir / "missing.vocab")


class TokenizerConfigTest(TestCase):
    def test_default_is_bpe_also_for_a_saved_config_without_the_key(self):
        self.assertEqual(load_config("tiny").data.tokenizer, "bpe")
        self.assertEqual(from_dict({"data": {"vocab_size": 100}}).data.tokenizer, "bpe")
        self.assertEqual(load_config("tiny", ["data.tokenizer=wordpiece"]).data.tokenizer, "wordpiece")

    def test_unknown_tokenizer_is_a_config_error_naming_the_choices(self):
        with self.assertRaisesRegex(ConfigError, r"data.tokenizer must be one of \['bpe', 'unigram', 'wordpiece', 'pretrained'\]. "
                                                 r"Received: tokenizer='sentencepiece'"):
            load_config("tiny", ["data.tokenizer=sentencepiece"])
        with self.assertRaisesRegex(ConfigError, "data.tokenizer must be one of"):
            tokenizer_filename("char")


if __name__ == "__main__":
    tf.test.main()
