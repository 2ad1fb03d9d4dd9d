"""Small models and inputs shared by the tests."""

import numpy as np
import tensorflow as tf

from t2t_keras.model import Transformer

TINY = dict(vocab_size=50, hidden_dim=16, num_layers=2, num_heads=4, intermediate_dim=32)


def tiny_transformer(**overrides):
    """A 2-layer d_model=16 Transformer with dropout switched off, built."""
    kwargs = dict(TINY, dropout=0.0)
    kwargs.update(overrides)
    model = Transformer(**kwargs)
    model.build()
    return model


def random_ids(batch, length, vocab_size=50, seed=0, low=4):
    """Token ids in [low, vocab_size): no padding or special ids."""
    return np.random.default_rng(seed).integers(low, vocab_size, size=(batch, length)).astype("int32")


class TestCase(tf.test.TestCase):
    """tf.test.TestCase without its inherited `test_session` helper, which unittest would report as skipped."""

    test_session = None
