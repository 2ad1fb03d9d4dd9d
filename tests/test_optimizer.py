"""FusedAdam: Keras' Adam update (β1, β2, ε of §5.3), one fused op per weight."""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.training.optimizer import FusedAdam
from t2t_keras.training.schedule import TransformerSchedule, make_optimizer
from tests.helpers import TestCase


def train(optimizer_class, gradients, sparse=False):
    """Weights after applying `gradients` one step each, from fixed initial weights."""
    weights = keras.Variable(np.linspace(-1, 1, 35).reshape(5, 7).astype("float32"))
    optimizer = optimizer_class(TransformerSchedule(hidden_dim=16, warmup_steps=3), 0.9, 0.98, 1e-9)
    optimizer.build([weights])

    @tf.function
    def step(gradient):
        if sparse:  # rows 1 and 3, as an embedding lookup's gradient
            gradient = tf.IndexedSlices(tf.gather(gradient, [1, 3]), tf.constant([1, 3]), tf.shape(gradient))
        optimizer.apply_gradients([(gradient, weights)])

    for gradient in gradients:
        step(tf.constant(gradient))
    return weights.numpy(), optimizer


class FusedAdamTest(TestCase):
    def setUp(self):
        self.gradients = np.random.default_rng(0).normal(size=(6, 5, 7)).astype("float32")

    def test_same_update_as_keras_adam(self):
        expected, _ = train(keras.optimizers.Adam, self.gradients)
        fused, optimizer = train(FusedAdam, self.gradients)
        self.assertAllClose(fused, expected, rtol=1e-6, atol=1e-6)
        self.assertEqual(int(optimizer.iterations.numpy()), len(self.gradients))

    def test_same_training_under_a_distribution_strategy(self):
        x = np.random.default_rng(1).normal(size=(32, 6)).astype("float32")
        y = (x @ np.arange(6, dtype="float32"))[:, None]

        def fit(optimizer_class):
            keras.utils.set_random_seed(0)
            with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():  # updates inside strategy.extended.update
                model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(1)])
                model.compile(optimizer_class(1e-2, 0.9, 0.98, 1e-9), "mse")
            model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
            return model.get_weights()

        for fused, expected in zip(fit(FusedAdam), fit(keras.optimizers.Adam)):
            self.assertAllClose(fused, expected, rtol=1e-5, atol=1e-6)

    def test_sparse_gradients_take_keras_update(self):
        expected, _ = train(keras.optimizers.Adam, self.gradients, sparse=True)
        fused, _ = train(FusedAdam, self.gradients, sparse=True)
        self.assertAllClose(fused, expected, rtol=1e-6, atol=1e-6)

    def test_make_optimizer_gives_it_and_it_serializes(self):
        optimizer = make_optimizer(hidden_dim=16, warmup_steps=10)
        self.assertIsInstance(optimizer, FusedAdam)
        restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
        self.assertIsInstance(restored, FusedAdam)
        self.assertEqual((restored.beta_1, restored.beta_2, restored.epsilon), (0.9, 0.98, 1e-9))


if __name__ == "__main__":
    tf.test.main()
