"""The dev batches `fit` validates on (training/validation_input.py): with one replica, the dev batches' own iterator,
one pass after another in the same order, and the same validation figures as the dev batches given to `fit` as
they are; with several replicas, the dev batches as they were."""

import types

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.training.validation_input import validation_input
from tests.helpers import TestCase


def dev_batches():
    """Six batches of different shapes, cached and repeated like `_dev_batches` (tasks/base.py), autotuning off."""
    rng = np.random.default_rng(0)
    rows = [(rng.normal(size=(2 + i % 3, 4)).astype("float32"), rng.normal(size=(2 + i % 3, 1)).astype("float32"))
            for i in range(6)]
    dataset = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=(
        tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None, 1), tf.float32))).cache()
    options = tf.data.Options()
    options.autotune.enabled = False
    return rows, dataset.repeat().with_options(options)


def one_replica():
    return tf.distribute.MirroredStrategy([tf.config.list_logical_devices("CPU")[0].name])


class ValidationInputTest(TestCase):
    def test_one_replica_reads_the_dev_batches_themselves_a_pass_at_a_time(self):
        rows, dev = dev_batches()
        distributed = validation_input(one_replica(), dev)
        self.assertIsInstance(distributed, tf.distribute.DistributedDataset)
        for _ in range(2):  # Keras makes a new iterator for every pass
            iterator = iter(distributed)
            for features, labels in rows * 2:  # two passes of the repeated batches, in order
                x, y = next(iterator)
                np.testing.assert_array_equal(x.numpy(), features)
                np.testing.assert_array_equal(y.numpy(), labels)

    def test_the_iterator_is_the_dev_batches_own_not_a_multi_device_one(self):
        _, dev = dev_batches()
        (worker_iterator,) = iter(validation_input(one_replica(), dev))._iterators
        self.assertIsInstance(worker_iterator._iterator, tf.data.Iterator)
        (spread,) = iter(one_replica().experimental_distribute_dataset(dev))._iterators
        self.assertNotIsInstance(spread._iterator, tf.data.Iterator)  # what Keras made of the plain dataset

    def test_fit_validates_as_with_the_dev_batches_as_they_are(self):
        rows, dev = dev_batches()
        strategy = one_replica()
        losses = []
        for validation_data in (dev, validation_input(strategy, dev)):
            keras.utils.set_random_seed(1)
            with strategy.scope():
                model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
                model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
            history = model.fit(dev, steps_per_epoch=3, epochs=3, validation_data=validation_data,
                                validation_steps=len(rows), verbose=0)
            losses.append(history.history["val_loss"])
        self.assertLen(losses[0], 3)
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)

    def test_several_replicas_or_workers_or_no_dev_split_keep_the_batches_as_they_were(self):
        _, dev = dev_batches()
        two = types.SimpleNamespace(num_replicas_in_sync=2)
        self.assertIs(validation_input(two, dev), dev)
        self.assertIsNone(validation_input(one_replica(), None))
