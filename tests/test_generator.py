"""A run's generator: batching by a token budget, input order, empty inputs, progress bar, compiled search,
n-best lists and truncation."""

import contextlib
import io
from unittest import mock

import numpy as np
import tensorflow as tf

from t2t_keras.decoding import beam_search, greedy_decode
from t2t_keras.decoding.batch_shapes import pad_batch, plan_batches
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.fast_path import GRAPH_SEARCH_HYPOTHESES, FastPath, Hardware
from tests.helpers import long_check
from tests.test_greedy import DecodingTestCase, decoding_model

# Ids 4.. stand for these characters; 0-3 are pad/unk/bos/eos.
SYMBOLS = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVW"


class CharTokenizer:
    """One id per character, with the interface of `t2t_keras.data.tokenizer.Tokenizer`."""

    def tokenize(self, strings):
        rows = [[4 + SYMBOLS.index(c) for c in s.decode("utf-8")] for s in strings.numpy()]
        return tf.RaggedTensor.from_row_lengths(
            tf.constant(sum(rows, []), tf.int32), [len(row) for row in rows]
        )

    def detokenize(self, ids):
        texts = []
        for row in np.asarray(ids):
            row = row[:np.argmax(row == 3)] if 3 in row else row
            texts.append("".join(SYMBOLS[i - 4] for i in row if i >= 4))
        return tf.constant(texts, tf.string)


SENTENCES = ["the cat", "", "a dog sees the big house", "hi", "trees", "", "water under the bridge", "x"]


def translate_one_by_one(model, sentences, **options):
    """Each sentence decoded alone, straight through the search function."""
    tokenizer, outputs = CharTokenizer(), []
    for sentence in sentences:
        if not sentence:
            outputs.append("")
            continue
        ids = tokenizer.tokenize(tf.constant([sentence])).to_tensor().numpy()
        source = np.append(ids, [[3]], axis=1)
        if options.get("method") == "greedy":
            tokens = greedy_decode(model, source, max_extra_length=5)["tokens"]
        else:
            tokens = beam_search(model, source, max_extra_length=5)["tokens"][:, 0]
        outputs.append(tokenizer.detokenize(tokens).numpy()[0].decode())
    return outputs


def best(generator, sentences, request=GenerationRequest(max_extra_length=5)):
    return generator.generate(sentences, request).best


class GeneratorTest(DecodingTestCase):
    def test_batched_translation_equals_one_by_one_in_input_order(self):
        model = decoding_model()
        translations = best(Generator(model, CharTokenizer(), batch_tokens=64), SENTENCES)
        self.assertEqual(translations, translate_one_by_one(model, SENTENCES))
        self.assertEqual([translations[1], translations[5]], ["", ""])
        self.assertGreater(len(set(translations)), 3)  # sentences got different outputs

    @long_check
    def test_greedy_translation_in_graph_mode(self):
        model = decoding_model()
        generator = Generator(model, CharTokenizer(), batch_tokens=32, jit_compile=False)
        self.assertEqual(best(generator, SENTENCES, GenerationRequest(max_extra_length=5, beam_size=1)),
                         translate_one_by_one(model, SENTENCES, method="greedy"))

    @long_check
    def test_nbest_lists_come_best_first_with_their_scores_and_the_best_is_the_one_best(self):
        model = decoding_model()
        generator = Generator(model, CharTokenizer(), batch_tokens=64)
        nbest = generator.generate(SENTENCES, GenerationRequest(max_extra_length=5, num_return=3))
        self.assertEqual([len(texts) for texts in nbest.texts], [3] * len(SENTENCES))
        for scores in nbest.scores:
            self.assertEqual(scores, sorted(scores, reverse=True))
        self.assertEqual(nbest.best, best(generator, SENTENCES))
        self.assertEqual(nbest.errors, [None] * len(SENTENCES))

    def test_a_sentence_over_the_model_length_is_cut_and_flagged(self):
        model = decoding_model()
        longest = model.max_length - 1
        generation = Generator(model, CharTokenizer(), jit_compile=False).generate(
            ["a" * (longest + 3), "a" * longest], GenerationRequest(max_extra_length=2, beam_size=1))
        self.assertEqual(generation.truncated, [True, False])

    @long_check
    def test_on_a_cpu_large_batches_search_in_graph_mode_small_ones_with_xla(self):
        """The fast path's choice per batch (`FastPath.decoding_jit`): a batch of GRAPH_SEARCH_HYPOTHESES
        hypotheses (rows x beam) or more decodes in graph mode, dropping its done sentences, a smaller one with
        XLA; the translations are those of XLA alone."""
        model, request = decoding_model(), GenerationRequest(max_extra_length=5, beam_size=4)
        rng = np.random.default_rng(0)
        many = ["".join(rng.choice(list("abcdefgh"), size=rng.integers(1, 7))) for _ in range(GRAPH_SEARCH_HYPOTHESES)]
        with mock.patch.object(FastPath, "detect", return_value=FastPath.of(Hardware(cpu_flags=frozenset({"avx2"})))):
            generator = Generator(model, CharTokenizer(), batch_tokens=4096)
            self.assertEqual([generator.uses_xla(rows, 4) for rows in (1, GRAPH_SEARCH_HYPOTHESES // 4)],
                             [True, False])
            batched = best(generator, many, request)
            self.assertEqual([key[1] for key in generator._searches], [False])
            alone = best(generator, many[:1], request)
            self.assertEqual([key[1] for key in generator._searches], [False, True])
        xla = Generator(model, CharTokenizer(), batch_tokens=4096, jit_compile=True)
        self.assertEqual(batched, best(xla, many, request))
        self.assertEqual(alone, batched[:1])

    def test_empty_inputs(self):
        generator = Generator(decoding_model(), CharTokenizer(), jit_compile=False)
        self.assertEqual(best(generator, []), [])
        generation = generator.generate(["", ""], GenerationRequest())
        self.assertEqual((generation.best, generation.scores), (["", ""], [[0.0], [0.0]]))

    def test_progress_bar_only_for_long_inputs(self):
        generator = Generator(decoding_model(), CharTokenizer(), jit_compile=False, progress_threshold=4)
        for sentences, shown in ((["ab", "cd"], False), (["ab", "cd", "e", "f", ""], True)):
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr):
                best(generator, sentences, GenerationRequest(max_extra_length=2))
            self.assertEqual(f"{len(sentences)}/{len(sentences)}" in stderr.getvalue(), shown)

    def test_rejects_bad_options(self):
        for options in ({"inputs": "ids"}, {"batch_tokens": 4}):
            with self.assertRaisesRegex(ValueError, "Received"):
                Generator(decoding_model(), CharTokenizer(), **options)
        with self.assertRaisesRegex(ValueError, r"beam_size must be an integer in \[1, .*Received: beam_size=0"):
            GenerationRequest(beam_size=0)


class BatchingTest(DecodingTestCase):
    def test_batches_respect_the_budget_and_cover_every_sentence_once(self):
        lengths = np.random.default_rng(0).integers(1, 40, size=200)
        lengths[[3, 17]] = 0  # empty inputs are left out
        batches = plan_batches(lengths, batch_tokens=256, length_multiple=8)
        covered = np.concatenate(batches)
        self.assertCountEqual(covered, np.flatnonzero(lengths))
        self.assertTrue(np.all(np.diff(lengths[covered]) <= 0))  # longest first
        for batch in batches:
            width = -(-lengths[batch].max() // 8) * 8
            self.assertLessEqual(len(batch) * width, 256)

    def test_oversized_sentence_gets_its_own_batch(self):
        self.assertEqual([list(b) for b in plan_batches([100, 3], batch_tokens=64)], [[0], [1]])

    def test_pad_batch_rounds_width_and_rows(self):
        batch = pad_batch([np.array([5, 6, 3]), np.array([7, 3]), np.array([8, 9, 10, 3])], 8, batch_tokens=64)
        self.assertEqual(batch.shape, (4, 8))
        self.assertAllEqual(batch[1], [7, 3, 0, 0, 0, 0, 0, 0])
        self.assertAllEqual(batch[3], batch[0])  # filler row repeats the first
        self.assertEqual(pad_batch([np.array([5, 3])] * 3, 8, batch_tokens=24).shape, (3, 8))  # budget caps rows
