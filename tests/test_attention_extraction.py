"""Attention extraction: token labels, shapes, masking, padding invariance, agreement with decoding."""

import tempfile

import numpy as np
import tensorflow as tf

from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding import greedy_decode
from t2t_keras.inspect.attention import (
    KINDS,
    decoder_inputs,
    encode_sources,
    extract_attention,
    extract_batch,
    pieces,
)
from t2t_keras.special_ids import BOS_ID, EOS_ID
from tests.helpers import TestCase, tiny_transformer, toy_pairs

SHORT, LONG = "the cat sees a dog", "a big old man eats bread under the green tree"


def check_masking(test, batch):
    """Rows of real queries sum to 1, padding keys and (decoder self-attention) future keys get exactly 0."""
    for kind in KINDS:
        weights = batch.weights(kind)  # (batch, layers, heads, queries, keys)
        query_real = batch.query_ids(kind) != 0
        key_pad = batch.key_ids(kind) == 0
        for b in range(weights.shape[0]):
            rows = weights[b][:, :, query_real[b]]  # (layers, heads, real queries, keys)
            test.assertAllClose(rows.sum(-1), np.ones(rows.shape[:-1]), atol=1e-5)
            test.assertTrue(np.all(rows[..., key_pad[b]] == 0.0), f"{kind}: weight on padding")
        if kind == "decoder_self":
            future = np.triu(np.ones(weights.shape[-2:], bool), k=1)
            test.assertTrue(np.all(weights[..., future] == 0.0), "decoder self-attention sees the future")


class AttentionExtractionTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        pairs = toy_pairs(200)
        cls.tokenizer = train_sentencepiece([s for pair in pairs for s in pair], f"{cls.tmp.name}/t.model", 100)
        cls.model = tiny_transformer(vocab_size=100)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_own_translation_is_the_greedy_hypothesis_with_labelled_axes(self):
        maps = extract_attention(self.model, self.tokenizer, SHORT, max_extra_length=5)
        source_ids = self.tokenizer.tokenize(SHORT).numpy().tolist() + [EOS_ID]
        self.assertEqual(maps.source_tokens, pieces(self.tokenizer, source_ids))
        self.assertEqual(maps.source_tokens[-1], "</s>")
        tokens = greedy_decode(self.model, np.array([source_ids], np.int32), max_extra_length=5)["tokens"][0]
        hypothesis = [t for t in tokens.numpy().tolist() if t != 0]
        hypothesis = hypothesis[:hypothesis.index(EOS_ID)] if EOS_ID in hypothesis else hypothesis
        self.assertEqual(maps.target_tokens, pieces(self.tokenizer, [BOS_ID] + hypothesis))
        self.assertEqual(maps.translation, self.tokenizer.detokenize(tokens).numpy().decode())
        S, T = len(maps.source_tokens), len(maps.target_tokens)
        self.assertEqual(maps.encoder.shape, (2, 4, S, S))
        self.assertEqual(maps.decoder_self.shape, (2, 4, T, T))
        self.assertEqual(maps.cross.shape, (2, 4, T, S))
        self.assertEqual(maps.axis_tokens("cross"), (maps.target_tokens, maps.source_tokens))

    def test_reference_translation(self):
        reference = "die Katze sieht ein Hund"
        maps = extract_attention(self.model, self.tokenizer, SHORT, reference)
        ids = [BOS_ID] + self.tokenizer.tokenize(reference).numpy().tolist()
        self.assertEqual(maps.target_tokens, pieces(self.tokenizer, ids))
        self.assertEqual(maps.translation, reference)
        self.assertEqual(maps.cross.shape[2:], (len(ids), len(maps.source_tokens)))

    def test_weights_are_those_of_the_model_layers(self):
        maps = extract_attention(self.model, self.tokenizer, SHORT, "die Katze")
        source = encode_sources(self.tokenizer, [SHORT])
        target_in = np.array([[BOS_ID] + self.tokenizer.tokenize("die Katze").numpy().tolist()], np.int32)
        memory, encoder = self.model.encode_with_attention(source)
        decoded = self.model.decode_with_attention(target_in, memory, self.model.source_mask(source))
        for layer in range(2):
            self.assertAllClose(maps.encoder[layer], encoder[layer][0])
            self.assertAllClose(maps.decoder_self[layer], decoded.self_weights[layer][0])
            self.assertAllClose(maps.cross[layer], decoded.cross_weights[layer][0])

    def test_rows_sum_to_one_and_masked_keys_get_exactly_zero(self):
        batch, _ = extract_batch(self.model, self.tokenizer, [SHORT, LONG], max_extra_length=4, extra_padding=2)
        self.assertTrue(np.any(batch.source == 0) and np.any(batch.target_in == 0))
        check_masking(self, batch)

    def test_padding_does_not_change_a_sentence_attention(self):
        references = ["die Katze sieht ein Hund", "ein gross alt Mann isst Brot"]
        batch, _ = extract_batch(self.model, self.tokenizer, [SHORT, LONG], references, extra_padding=3)
        for i, (source, reference) in enumerate(zip([SHORT, LONG], references)):
            alone = extract_attention(self.model, self.tokenizer, source, reference)
            padded = batch.example(i, self.tokenizer)
            self.assertEqual((padded.source_tokens, padded.target_tokens), (alone.source_tokens, alone.target_tokens))
            for kind in KINDS:
                self.assertAllClose(padded.weights(kind), alone.weights(kind), atol=1e-5)

    def test_decoder_inputs_drop_eos_and_what_follows(self):
        tokens = np.array([[5, 6, EOS_ID, 0, 0], [7, 8, 9, 10, 0], [EOS_ID, 0, 0, 0, 0]])
        expected = np.array([[BOS_ID, 5, 6, 0, 0], [BOS_ID, 7, 8, 9, 10], [BOS_ID, 0, 0, 0, 0]])
        self.assertAllEqual(decoder_inputs(tokens), expected)

    def test_bad_arguments(self):
        maps = extract_attention(self.model, self.tokenizer, SHORT, "die")
        with self.assertRaisesRegex(ValueError, "kind must be one of"):
            maps.weights("self")
        with self.assertRaisesRegex(ValueError, "one target text per source text"):
            extract_batch(self.model, self.tokenizer, [SHORT, LONG], ["die"])


if __name__ == "__main__":
    tf.test.main()
