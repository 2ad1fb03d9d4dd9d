"""Where a training session's wall time went (training/wall_time.py): exclusive parts that add up, steps told apart,
the record in RUN/timing.json; the validation pass outside auto-clustering (training/unclustered.py).

Structure and consistency are asserted, never how long anything took.
"""

import pathlib
import tempfile
import time
import unittest

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.inspect.summary import RunAttentionSummary
from t2t_keras.resolved_run import resolve_run
from t2t_keras.training.trainer import compile_model, train
from t2t_keras.training.unclustered import validation_in_graph_mode
from t2t_keras.training.wall_time import PARTS, SessionClock, Timed, WallClock, folded, format_breakdown, session_record
from tests.helpers import TestCase, long_check, toy_config, write_toy_corpus


class FakeTime:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class FakeModel:
    """What `SessionClock` touches: a train function that takes `durations` seconds of `fake_time`, the updates."""

    def __init__(self, fake_time, durations):
        durations = iter(durations)
        self.optimizer = type("Optimizer", (), {"iterations": tf.Variable(0, dtype=tf.int64)})()

        def train_function(iterator):
            fake_time.now += next(durations)
            self.optimizer.iterations.assign_add(1)

        self.train_function = train_function


class WallClockTest(unittest.TestCase):
    def test_parts_are_exclusive_and_add_up(self):
        now = FakeTime()
        clock = WallClock("start-up", clock=now)
        now.now += 2
        clock.switch("training steps")
        now.now += 3
        with clock.part("checkpoint saves"):
            now.now += 1
            with clock.part("logging"):  # a part inside a part pauses it
                now.now += 0.5
            now.now += 1
        now.now += 4
        self.assertEqual(clock.stop(), 11.5)
        self.assertEqual(dict(clock.seconds), {"start-up": 2, "training steps": 7, "checkpoint saves": 2,
                                               "logging": 0.5})

    def test_a_part_is_left_on_an_error(self):
        now = FakeTime()
        clock = WallClock("other", clock=now)
        with self.assertRaises(RuntimeError), clock.part("validation"):
            now.now += 1
            raise RuntimeError
        now.now += 2
        clock.stop()
        self.assertEqual(dict(clock.seconds), {"validation": 1, "other": 2})


class AtStep(keras.callbacks.Callback):
    """Calls `work` at every step's end (a summary or checkpoint callback's stand-in)."""

    def __init__(self, work):
        super().__init__()
        self.work = work

    def on_train_batch_end(self, batch, logs=None):
        self.work()


class SessionClockTest(unittest.TestCase):
    def session(self, durations):
        now = FakeTime()
        session = SessionClock(WallClock("start-up", clock=now))
        model = FakeModel(now, durations)
        session.set_model(model)
        now.now += 5
        session.on_train_begin()
        return session, model, now

    def test_the_first_step_and_the_far_slower_ones_are_compilation(self):
        # 0.9 s is over five times the median, but under the second that a compilation takes at least
        durations = [30.0, 0.2, 0.25, 0.2, 12.0, 0.3, 0.2, 0.9]
        session, model, now = self.session(durations)
        for _ in durations:
            model.train_function(None)
            session.on_train_batch_end(0)
        self.assertEqual(session.compiled, [1, 5])
        self.assertAlmostEqual(session.clock.seconds["compilation"], 42.0)
        self.assertAlmostEqual(session.clock.seconds["training steps"], sum(durations) - 42.0)
        self.assertEqual(session.milestones, {1: 35.0})

    def test_validations_are_their_own_part_with_their_steps(self):
        session, model, now = self.session([1.0, 1.0])
        model.train_function(None)
        session.on_train_batch_end(0)
        session.on_test_begin()
        now.now += 4
        session.on_test_end()
        record = session_record("train", session)
        self.assertEqual(record["validations"], [{"step": 1, "seconds": 4.0}])
        self.assertEqual(record["parts"], {"start-up": 5.0, "compilation": 1.0, "validation": 4.0, "other": 0.0})
        self.assertEqual(record["seconds"], 10.0)
        self.assertEqual(list(record["parts"]), [part for part in PARTS if part in record["parts"]])

    @staticmethod
    def two_validated_epochs(session, model, now, after_step):
        """Two epochs of two steps, each ended by a 2-second validation pass; `after_step(step)` after each step's
        end, before the pass."""
        session.set_params({"steps": 2})
        for step in range(4):
            model.train_function(None)
            session.on_train_batch_end(step % 2)
            after_step(step)
            if step % 2:
                session.on_test_begin()
                now.now += 2
                session.on_test_end()

    def test_from_the_second_validation_the_end_of_the_epoch_is_validation(self):
        session, model, now = self.session([1.0] * 4)

        def after_step(step):  # Keras makes the pass's iterator before the pass begins
            now.now += 3 if step % 2 else 0.5

        self.two_validated_epochs(session, model, now, after_step)
        self.assertEqual([v["seconds"] for v in session.validations], [2.0, 5.0])
        self.assertEqual(session.clock.seconds["validation"], 7.0)
        self.assertEqual(session.clock.seconds["other"], 4.0)  # 0.5 s twice, and the first epoch end

    def test_a_part_timed_inside_a_validation_is_not_the_pass(self):
        session, model, now = self.session([1.0] * 4)
        summaries = Timed(AtStep(lambda: setattr(now, "now", now.now + 6)), session.clock, "attention summaries")
        # the epoch's last step makes its summaries after the clock turned to validation
        self.two_validated_epochs(session, model, now, lambda step: summaries.on_train_batch_end(step % 2))
        self.assertEqual([v["seconds"] for v in session.validations], [2.0, 2.0])
        self.assertEqual(session.clock.seconds["validation"], 4.0)
        self.assertEqual(session.clock.seconds["attention summaries"], 24.0)

    def test_a_train_session_folds_into_the_job_that_ran_it(self):
        job = {"kind": "main", "seconds": 20.0, "parts": {"other": 1.0, "training": 15.0, "export": 4.0}}
        session = {"kind": "train", "seconds": 14.0, "steps": 3, "parts": {"start-up": 2.0, "training steps": 12.0}}
        whole = folded(job, "training", session)
        self.assertEqual(whole["parts"], {"start-up": 2.0, "training steps": 12.0, "export": 4.0, "other": 2.0})
        self.assertEqual(sum(whole["parts"].values()), whole["seconds"])
        self.assertEqual(whole["steps"], 3)
        self.assertIn("  export                      4.0 s  20.0%", format_breakdown(whole))


class RecordingJit(keras.callbacks.Callback):
    """Records TensorFlow's auto-clustering setting during training steps and during the validation pass."""

    def __init__(self):
        super().__init__()
        self.training, self.validation = set(), set()

    def on_train_batch_begin(self, batch, logs=None):
        self.training.add(tf.config.optimizer.get_jit())

    def on_test_batch_begin(self, batch, logs=None):
        self.validation.add(tf.config.optimizer.get_jit())


@long_check
class TrainingSessionTimingTest(TestCase):
    """A session of a toy run: 6 updates, a validation and a checkpoint every 3. A second session's record and
    points are the main job's (tests.test_main_job), and the points' minutes across sessions tests.test_quality_curve's.
    """

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        files = write_toy_corpus(pathlib.Path(cls.tmp.name) / "data")
        cls.config = toy_config(files, attention_every_steps=3, attention_probes=1, fuse_elementwise=True,
                                quality_every_minutes=0.001, quality_sentences=4)
        cls.run_dir = pathlib.Path(cls.tmp.name) / "run"
        cls.jit = RecordingJit()
        began = time.monotonic()
        cls.first = train(resolve_run(cls.run_dir, cls.config), callbacks=[RunAttentionSummary(cls.run_dir), cls.jit],
                          verbose=0)
        cls.wall = time.monotonic() - began

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_every_part_is_measured_and_they_add_up_to_the_wall_time(self):
        record = self.first.timing
        for part in ("start-up", "compilation", "training steps", "validation", "checkpoint saves", "logging",
                     "attention summaries", "quality points", "other"):
            self.assertIn(part, record["parts"])
            self.assertGreaterEqual(record["parts"][part], 0.0)
        self.assertAlmostEqual(sum(record["parts"].values()), record["seconds"], delta=0.05)
        self.assertLessEqual(record["seconds"], self.wall)

    def test_the_record_counts_steps_validations_and_compilations(self):
        record = self.first.timing
        self.assertEqual((record["start_step"], record["final_step"], record["steps"]), (0, 6, 6))
        self.assertEqual([v["step"] for v in record["validations"]], [3, 6])
        self.assertEqual(record["compiling_steps"][0], 1)
        self.assertIn("1", record["seconds_to_step"])

    def test_the_session_record_is_written_to_the_run(self):
        self.assertEqual(_read(self.run_dir / "timing.json"), [self.first.timing])

    def test_quality_points_go_on_in_time(self):
        points = _read(self.run_dir / "quality.json")["points"]
        minutes = [point["minutes"] for point in points]
        self.assertEqual(minutes, sorted(minutes))
        self.assertEqual(len(set(minutes)), len(minutes))
        self.assertLessEqual(minutes[-1] * 60, self.first.timing["seconds"])
        self.assertEqual(points[-1]["step"], 6)  # the session's last weights

    def test_validation_runs_outside_auto_clustering(self):
        self.assertEqual(self.jit.training, {"autoclustering"})
        self.assertTrue(self.jit.validation)
        self.assertNotIn("autoclustering", self.jit.validation)


class NotForXla(keras.Model):
    """One dense layer that, outside training, also formats its inputs as strings, which XLA cannot compile."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x, training=None):
        y = self.dense(x)
        if not training:  # the validation's forward pass
            digits = tf.cast(tf.reduce_sum(tf.strings.length(tf.strings.as_string(x))), y.dtype)
            y += 0.0 * digits
        return y


class ValidationOutsideXlaTest(TestCase):
    """Under XLA, Keras would compile the validation's test step once per dev shape: it runs in graph mode."""

    def setUp(self):
        self.x, self.y = np.ones((4, 2), np.float32), np.full((4, 1), 3.0, np.float32)

    def compiled(self):
        model = NotForXla()
        model.compile("sgd", "mse", jit_compile=True)
        return model

    def test_the_test_step_would_be_compiled_by_xla(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "AsString"):
            self.compiled().evaluate(self.x, self.y, verbose=0)

    def test_validation_runs_in_graph_mode_and_training_keeps_xla(self):
        model = validation_in_graph_mode(self.compiled())
        self.assertTrue(model.jit_compile)
        history = model.fit(self.x, self.y, validation_data=(self.x, self.y), epochs=2, verbose=0)
        kernel, bias = model.dense.get_weights()
        expected = np.mean((self.x @ kernel + bias - self.y) ** 2)  # the weights after the last epoch
        self.assertAllClose(history.history["val_loss"][-1], expected, rtol=1e-5)
        self.assertLess(history.history["val_loss"][-1], history.history["loss"][0])  # the training step trained

    def test_the_trainer_builds_its_validation_so(self):
        files = write_toy_corpus(pathlib.Path(self.get_temp_dir()) / "data")
        config = toy_config(files, jit_compile=True)
        model = compile_model(config, tf.distribute.get_strategy())
        self.assertTrue(model.jit_compile)
        self.assertIsNotNone(model.test_function)  # built by `validation_in_graph_mode`, kept by `fit`


def _read(path):
    import json

    return json.loads(pathlib.Path(path).read_text())


if __name__ == "__main__":
    unittest.main()
