"""TransformerSchedule against eq. (3), and the Adam optimizer built on it."""

import copy

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.errors import ConfigError
from t2t_keras.training.schedule import TransformerSchedule, make_optimizer
from tests.helpers import TestCase


def closed_form(step_num, hidden_dim, warmup_steps, scale=1.0):
    return scale * hidden_dim**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


class TransformerScheduleTest(TestCase):
    def test_matches_formula_at_step_1_warmup_and_ten_times_warmup(self):
        schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000, scale=2.0)
        for step_num in (1, 4000, 40000):
            # The optimizer's counter is step_num - 1 during the step_num-th update.
            self.assertAllClose(schedule(step_num - 1), closed_form(step_num, 512, 4000, 2.0), rtol=1e-6)
        self.assertEqual(schedule(0).dtype, tf.float32)

    def test_peaks_at_warmup(self):
        schedule = TransformerSchedule(hidden_dim=64, warmup_steps=50)
        rates = np.array([float(schedule(i)) for i in range(200)])  # step_num 1..200
        self.assertEqual(int(np.argmax(rates)) + 1, 50)
        self.assertAllClose(rates.max(), (64 * 50) ** -0.5, rtol=1e-6)
        self.assertTrue(np.all(np.diff(rates[:49]) > 0) and np.all(np.diff(rates[50:]) < 0))

    def test_first_adam_update_uses_step_num_one(self):
        optimizer = make_optimizer(hidden_dim=16, warmup_steps=10)
        variable = keras.Variable(np.zeros(3, "float32"))
        optimizer.build([variable])
        expected = closed_form(1, 16, 10)
        self.assertAllClose(optimizer.learning_rate, expected, rtol=1e-6)
        optimizer.apply_gradients([(tf.ones(3), variable)])
        # Adam's first bias-corrected step has size lr · g / |g| (epsilon is negligible).
        self.assertAllClose(variable.numpy(), -expected * np.ones(3), rtol=1e-5)
        self.assertAllClose(optimizer.learning_rate, closed_form(2, 16, 10), rtol=1e-6)

    def test_adam_config_round_trip(self):
        optimizer = keras.optimizers.Adam(TransformerSchedule(hidden_dim=32, warmup_steps=7, scale=0.5))
        config = optimizer.get_config()
        self.assertEqual(config["learning_rate"]["registered_name"], "t2t_keras>TransformerSchedule")
        restored = keras.optimizers.Adam.from_config(copy.deepcopy(config))  # from_config edits its argument
        self.assertEqual(restored.get_config(), config)
        for opt in (optimizer, restored):
            variable = keras.Variable(np.zeros(1, "float32"))
            opt.build([variable])
            for _ in range(3):
                opt.apply_gradients([(tf.ones(1), variable)])
            self.assertAllClose(opt.learning_rate, closed_form(4, 32, 7, 0.5), rtol=1e-6)
        schedule = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(TransformerSchedule(hidden_dim=8, warmup_steps=3))
        )
        self.assertIsInstance(schedule, TransformerSchedule)
        self.assertEqual(schedule.get_config(), {"hidden_dim": 8, "warmup_steps": 3, "scale": 1.0})

    def test_reads_the_config_of_models_saved_with_optimizer_side_accumulation(self):
        old = {"hidden_dim": 8, "warmup_steps": 3, "scale": 1.0, "gradient_accumulation_steps": 1}
        self.assertEqual(TransformerSchedule.from_config(old).get_config(), {"hidden_dim": 8, "warmup_steps": 3,
                                                                            "scale": 1.0})

    def test_make_optimizer_uses_paper_hyperparameters(self):
        config = make_optimizer(hidden_dim=512).get_config()
        self.assertEqual((config["beta_1"], config["beta_2"], config["epsilon"]), (0.9, 0.98, 1e-9))
        self.assertEqual(config["learning_rate"]["config"]["warmup_steps"], 4000)

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ConfigError, "Received: warmup_steps=0"):
            TransformerSchedule(hidden_dim=8, warmup_steps=0)
        with self.assertRaisesRegex(ConfigError, "Received: hidden_dim=-1"):
            TransformerSchedule(hidden_dim=-1)
        with self.assertRaisesRegex(ConfigError, "Received: scale=0"):
            TransformerSchedule(hidden_dim=8, scale=0)


if __name__ == "__main__":
    tf.test.main()
