"""Adaptive softmax (Grave et al., 2017): a normalised distribution over the whole vocabulary."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.build import build_model
from t2t_keras.config import load_config
from t2t_keras.decoding import beam_search
from t2t_keras.errors import ConfigError
from t2t_keras.layers import AdaptiveSoftmax
from t2t_keras.model import Transformer
from t2t_keras.params import count_parameters
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from tests.helpers import TestCase, random_ids


def hidden(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


class AdaptiveSoftmaxTest(TestCase):
    def test_probabilities_over_the_vocabulary_sum_to_one(self):
        for cutoffs in ([], [10], [5, 20, 40]):
            with self.subTest(cutoffs=cutoffs):
                log_probs = AdaptiveSoftmax(50, cutoffs)(hidden(2, 3, 16)).numpy()
                self.assertEqual(log_probs.shape, (2, 3, 50))
                self.assertAllClose(np.exp(log_probs).sum(-1), np.ones((2, 3)), atol=1e-5)

    def test_a_single_cluster_is_the_full_softmax(self):
        layer = AdaptiveSoftmax(30)
        h = hidden(4, 16, seed=1)
        log_probs = layer(h).numpy()
        expected = tf.nn.log_softmax(h @ layer.head.kernel.numpy()).numpy()
        self.assertAllClose(log_probs, expected, atol=1e-5)

    def test_tail_tokens_are_cluster_probability_times_within_cluster_probability(self):
        layer = AdaptiveSoftmax(20, [8, 14])
        h = hidden(3, 16, seed=2)
        log_probs = layer(h).numpy()
        head = tf.nn.log_softmax(h @ layer.head.kernel.numpy()).numpy()  # 8 shortlist + 2 clusters
        self.assertAllClose(log_probs[:, :8], head[:, :8], atol=1e-5)
        tail = h @ layer.tail_1_projection.kernel.numpy() @ layer.tail_1.kernel.numpy()
        expected = head[:, 9:10] + tf.nn.log_softmax(tail).numpy()
        self.assertAllClose(log_probs[:, 14:], expected, atol=1e-5)
        self.assertEqual(layer.tail_0_projection.kernel.shape, (16, 4))  # 16 / 4
        self.assertEqual(layer.tail_1_projection.kernel.shape, (16, 1))  # 16 / 16

    def test_rejects_bad_cutoffs(self):
        for cutoffs in ([0], [10, 10], [12, 5], [50]):
            with self.assertRaisesRegex(ValueError, "cutoffs must increase"):
                AdaptiveSoftmax(50, cutoffs)


class AdaptiveTransformerTest(TestCase):
    def model(self):
        keras.utils.set_random_seed(5)
        model = Transformer(vocab_size=40, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
                            dropout=0.0, softmax="adaptive", adaptive_cutoffs=[10, 25], tie_embeddings="all")
        model.build()
        return model

    def test_trains_and_decodes(self):
        model = self.model()
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=LabelSmoothedCrossEntropy(epsilon=0.1))
        source, target = random_ids(16, 6, vocab_size=40, seed=3), random_ids(16, 6, vocab_size=40, seed=4)
        history = model.fit((source, target), target, epochs=30, batch_size=16, verbose=0).history["loss"]
        self.assertLess(history[-1], 0.7 * history[0])
        out = beam_search(model, np.pad(source[:2, :5], ((0, 0), (0, 1)), constant_values=3), beam_size=3,
                          max_extra_length=4)
        tokens = out["tokens"].numpy()
        self.assertTrue(np.all((tokens >= 0) & (tokens < 40)))
        self.assertTrue(np.all(np.isfinite(out["scores"].numpy())))

    def test_label_smoothing_spreads_over_the_whole_vocabulary(self):
        model = self.model()
        source, target = random_ids(2, 5, vocab_size=40, seed=6), random_ids(2, 5, vocab_size=40, seed=7)
        log_probs = model((source, target)).numpy()
        epsilon, others = 0.1, 0.1 / 39  # the loss's rule: 1 - epsilon on gold, epsilon / (V - 1) on each other
        loss = float(LabelSmoothedCrossEntropy(epsilon=epsilon, reduction="sum")(target, log_probs))
        gold = np.take_along_axis(log_probs, target[..., None], -1)[..., 0]
        expected = -(1 - epsilon - others) * gold - others * log_probs.sum(-1)
        self.assertAllClose(loss, float(np.sum(expected)), rtol=1e-4)

    def test_config_and_counts(self):
        config = load_config("tiny", ["model.softmax=adaptive", "model.adaptive_cutoffs=[200, 600]"])
        model = build_model(config.model)
        self.assertEqual(model.count_params(), count_parameters(config.model)["total"])
        with self.assertRaisesRegex(ConfigError, "fewer than d_model dimensions"):
            load_config("tiny", ["model.softmax=adaptive", "model.tie_embeddings=target"])
        with self.assertRaisesRegex(ConfigError, "set model.softmax=adaptive"):
            load_config("tiny", ["model.adaptive_cutoffs=[100]"])


if __name__ == "__main__":
    tf.test.main()
