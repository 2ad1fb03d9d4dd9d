"""The quality curve: dev BLEU points against wall-clock minutes while a run trains (training/quality.py), their
settings, and the curve drawn as a PNG (inspect/quality_plot.py). A run's points from `train` are in
tests.test_wall_time; the main job's plot in tests.test_main_job."""

import pathlib
import tempfile
import unittest

import numpy as np
import tensorflow as tf

from t2t_keras.config import load_config
from t2t_keras.errors import ConfigError
from t2t_keras.inspect.quality_plot import write_quality_plot
from t2t_keras.training.quality import QualityCurve

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class FakeEvaluator:
    sources = ["a", "b"]

    def __init__(self):
        self.calls = 0

    def bleu(self):
        self.calls += 1
        return 10.0 * self.calls


class FakeModel:
    def __init__(self):
        self.optimizer = type("Optimizer", (), {"iterations": tf.Variable(0, dtype=tf.int64)})()


class QualityCurveTest(unittest.TestCase):
    def session(self, seconds_per_step, steps, offset_seconds=0.0, points=()):
        """A session of `steps` steps of `seconds_per_step`, a point due every minute: the points written."""
        now, written = [0.0], []
        curve = QualityCurve(FakeEvaluator(), 1.0, lambda points: written.append(list(points)), lambda: now[0],
                             offset_seconds, points)
        model = FakeModel()
        curve.set_model(model)
        curve.on_train_begin()
        for _ in range(steps):
            now[0] += seconds_per_step
            model.optimizer.iterations.assign_add(1)
            curve.on_train_batch_end(0, {"loss": 3.0})
        curve.on_train_end()
        return written[-1] if written else []

    def test_a_point_every_interval_and_one_at_the_end(self):
        points = self.session(25.0, 10)  # 250 s: points after steps 3 (75 s) and 6 (150 s), 9 (225 s), and 10
        self.assertEqual([p["step"] for p in points], [3, 6, 9, 10])
        self.assertEqual([p["minutes"] for p in points], [1.25, 2.5, 3.75, 4.167])
        self.assertEqual([p["bleu"] for p in points], [10.0, 20.0, 30.0, 40.0])
        self.assertEqual({p["loss"] for p in points}, {3.0})

    def test_a_short_session_makes_no_point(self):
        self.assertEqual(self.session(1.0, 10), [])

    def test_a_resumed_session_goes_on_after_the_earlier_ones(self):
        first = self.session(25.0, 4)
        second = self.session(25.0, 4, offset_seconds=100.0, points=first)
        minutes = [p["minutes"] for p in second]
        self.assertEqual(second[:len(first)], first)
        self.assertEqual(minutes, sorted(minutes))
        self.assertGreater(minutes[len(first)], 100.0 / 60)


class QualitySettingsTest(unittest.TestCase):
    def test_the_main_jobs_preset_draws_the_curve(self):
        training = load_config("mini").training
        self.assertGreater(training.quality_every_minutes, 0)
        self.assertGreater(training.quality_sentences, 0)

    def test_bad_values_are_refused(self):
        for setting in ("training.quality_every_minutes=-1", "training.quality_every_minutes=true",
                        "training.quality_sentences=0"):
            with self.subTest(setting), self.assertRaisesRegex(ConfigError, setting.split("=")[0]):
                load_config("tiny", [setting])


class QualityPlotTest(unittest.TestCase):
    def test_the_plot_is_a_png(self):
        points = [{"minutes": 1.0, "step": 100, "bleu": 3.5, "loss": 6.0},
                  {"minutes": 2.5, "step": 260, "bleu": 9.25, "loss": 4.5},
                  {"minutes": 4.0, "step": 420, "bleu": 12.0, "loss": None}]
        with tempfile.TemporaryDirectory() as tmp:
            path = write_quality_plot(points, pathlib.Path(tmp) / "quality.png")
            data = pathlib.Path(path).read_bytes()
            self.assertTrue(data.startswith(PNG_SIGNATURE))
            image = tf.io.decode_png(data).numpy()
            self.assertEqual(image.ndim, 3)
            self.assertGreater(min(image.shape[:2]), 100)
            self.assertGreater(len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)), 2)  # something drawn
            self.assertEqual(sorted(p.name for p in pathlib.Path(tmp).iterdir()), ["quality.png"])  # no temp left


if __name__ == "__main__":
    unittest.main()
