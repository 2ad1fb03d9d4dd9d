"""§3.2: scaled dot-product and multi-head attention against a numpy reference."""

import numpy as np
import tensorflow as tf

from t2t_keras.layers import MultiHeadAttention, ScaledDotProductAttention, masks
from tests.helpers import TestCase


def numpy_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v for one head; mask True = attend."""
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = weights / weights.sum(-1, keepdims=True)
    return weights @ v, weights


class MaskTest(TestCase):
    def test_padding_and_causal_masks(self):
        ids = np.array([[5, 6, 0], [7, 0, 0]])
        self.assertAllEqual(masks.padding_mask(ids), [[True, True, False], [True, False, False]])
        self.assertAllEqual(masks.causal_mask(3), np.tril(np.ones((3, 3), bool)))
        combined = masks.attention_mask(masks.padding_mask(ids), masks.causal_mask(3))
        self.assertAllEqual(combined[1], [[True, False, False]] * 3)
        self.assertAllEqual(combined[0], [[True, False, False], [True, True, False], [True, True, False]])

    def test_causal_mask_with_offset_for_a_cache(self):
        # one query at step 2 against 4 cache slots: slots 0..2 visible
        self.assertAllEqual(masks.causal_mask(1, 4, offset=2), [[True, True, True, False]])


class ScaledDotProductAttentionTest(TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        self.q = rng.normal(size=(2, 3, 2, 4)).astype("float32")  # (batch, q_len, heads, d_k)
        self.k = rng.normal(size=(2, 5, 2, 4)).astype("float32")
        self.v = rng.normal(size=(2, 5, 2, 6)).astype("float32")

    def test_matches_numpy_per_head(self):
        out, weights = ScaledDotProductAttention()(self.q, self.k, self.v)
        for b in range(2):
            for h in range(2):
                ref_out, ref_w = numpy_attention(self.q[b, :, h], self.k[b, :, h], self.v[b, :, h])
                self.assertAllClose(out[b, :, h], ref_out, atol=1e-5)
                self.assertAllClose(weights[b, h], ref_w, atol=1e-6)

    def test_masked_keys_get_exactly_zero_and_rows_sum_to_one(self):
        key_padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
        mask = masks.attention_mask(key_padding, masks.causal_mask(3, 5, offset=1))
        out, weights = ScaledDotProductAttention()(self.q, self.k, self.v, attention_mask=mask)
        weights = weights.numpy()
        full_mask = np.broadcast_to(np.asarray(mask)[:, None], weights.shape)
        self.assertTrue(np.all(weights[~full_mask] == 0.0))
        self.assertAllClose(weights.sum(-1), np.ones((2, 2, 3)), atol=1e-6)
        ref_out, _ = numpy_attention(self.q[0, :, 1], self.k[0, :, 1], self.v[0, :, 1], np.asarray(mask)[0])
        self.assertAllClose(out[0, :, 1], ref_out, atol=1e-5)


class MultiHeadAttentionTest(TestCase):
    def test_hand_set_weights_match_numpy(self):
        rng = np.random.default_rng(1)
        heads, d_model, d_k, d_v = 2, 6, 3, 4
        layer = MultiHeadAttention(heads, key_dim=d_k, value_dim=d_v)
        x = rng.normal(size=(1, 4, d_model)).astype("float32")
        memory = rng.normal(size=(1, 5, d_model)).astype("float32")
        layer(x, memory)
        wq, wk = rng.normal(size=(2, d_model, heads * d_k)).astype("float32")
        wv = rng.normal(size=(d_model, heads * d_v)).astype("float32")
        wo = rng.normal(size=(heads * d_v, d_model)).astype("float32")
        biases = [rng.normal(size=(n,)).astype("float32") for n in (heads * d_k, heads * d_k, heads * d_v, d_model)]
        for dense, w, b in zip((layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense),
                               (wq, wk, wv, wo), biases):
            dense.set_weights([w, b])
        out, weights = layer(x, memory)

        q, k, v = x[0] @ wq + biases[0], memory[0] @ wk + biases[1], memory[0] @ wv + biases[2]
        head_outputs = []
        for h in range(heads):
            o, w = numpy_attention(q[:, h * d_k:(h + 1) * d_k], k[:, h * d_k:(h + 1) * d_k],
                                   v[:, h * d_v:(h + 1) * d_v])
            head_outputs.append(o)
            self.assertAllClose(weights[0, h], w, atol=1e-5)
        expected = np.concatenate(head_outputs, -1) @ wo + biases[3]
        self.assertAllClose(out[0], expected, atol=1e-4)

    def test_every_call_returns_output_and_weights(self):
        layer = MultiHeadAttention(2, key_dim=4)
        x, memory = np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")
        out = layer(x, memory)
        self.assertEqual((out.output.shape, out.weights.shape), ((1, 3, 8), (1, 2, 3, 5)))
        slots = tf.zeros((1, 2, 5, 4))  # (batch, heads, slots, key_dim): decoding caches hold heads first
        cached = layer.attend_cached(x[:, :1], {"key": slots, "value": slots}, 0)
        self.assertEqual((cached.output.shape, cached.weights.shape), ((1, 1, 8), (1, 2, 1, 5)))
        self.assertEqual(cached.cache["key"].shape, (1, 2, 5, 4))

    def test_independent_key_and_value_dims(self):
        layer = MultiHeadAttention(1, key_dim=16, value_dim=8)
        layer(np.ones((1, 3, 12), "float32"))
        self.assertEqual(layer.query_dense.kernel.shape, (12, 16))
        self.assertEqual(layer.value_dense.kernel.shape, (12, 8))
        self.assertEqual(layer.output_dense.kernel.shape, (8, 12))

    def test_incremental_cache_equals_full_causal_attention(self):
        layer = MultiHeadAttention(2, key_dim=4)
        x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
        full = layer(x, attention_mask=masks.attention_mask(causal=masks.causal_mask(5))).output
        cache = {"key": tf.zeros((2, 2, 5, 4)), "value": tf.zeros((2, 2, 5, 4))}  # (batch, heads, slots, dim)
        steps = []
        for t in range(5):
            mask = masks.attention_mask(causal=masks.causal_mask(1, 5, offset=t))
            out, _, cache = layer.attend_cached(x[:, t:t + 1], cache, t, attention_mask=mask)
            steps.append(out)
        self.assertAllClose(tf.concat(steps, 1), full, atol=1e-5)

    def test_a_growing_cache_equals_full_causal_attention(self):
        layer = MultiHeadAttention(2, key_dim=4)
        x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
        full = layer(x, attention_mask=masks.attention_mask(causal=masks.causal_mask(5))).output
        cache = {"key": tf.zeros((2, 2, 0, 4)), "value": tf.zeros((2, 2, 0, 4))}  # no slots: each step appends
        steps = []
        for t in range(5):
            out, weights, cache = layer.attend_cached(x[:, t:t + 1], cache, None)
            self.assertEqual((cache["key"].shape, weights.shape), ((2, 2, t + 1, 4), (2, 2, 1, t + 1)))
            steps.append(out)
        self.assertAllClose(tf.concat(steps, 1), full, atol=1e-5)

    def test_precomputed_keys_and_values(self):
        layer = MultiHeadAttention(2, key_dim=4)
        x, memory = np.ones((1, 2, 8), "float32"), np.arange(24, dtype="float32").reshape(1, 3, 8) / 24
        direct = layer(x, memory)
        precomputed = layer.attend_precomputed(x, layer.cache_key_value(memory))
        self.assertAllClose(precomputed.output, direct.output)
        self.assertAllClose(precomputed.weights, direct.weights)

    def test_rejects_bad_sizes(self):
        with self.assertRaisesRegex(ValueError, "num_heads=0"):
            MultiHeadAttention(0, key_dim=4)


if __name__ == "__main__":
    tf.test.main()
