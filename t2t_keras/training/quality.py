"""Dev BLEU against wall-clock minutes while a run trains: the points of its quality curve.

Every `training.quality_every_minutes` minutes of a training session, and once more when a session that made a
point ends, `QualityCurve` translates a fixed sample of at most `training.quality_sentences` dev sentences greedily
with the model being trained (the `DevEvaluator` of `training.eval_every_steps`, its BLEU only) and appends a point
to RUN/quality.json:

    minutes   wall-clock minutes since the run's training began: this session's, start-up included, after the
              earlier sessions' (their RUN/timing.json records), so a resumed run's points go on in time
    step      optimizer updates
    bleu      sacreBLEU of the sample
    loss      the training loss as `fit` logs it (the running mean of the epoch)
    seconds   what the point cost

The decode runs outside auto-clustering (unclustered.py) and is timed as the session's `quality points`; it is
inside the training time budget. The main job draws the points (`inspect.quality_plot`).
"""

import logging
import time

import keras

from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.training.keep_best import DevEvaluator, sample_pairs
from t2t_keras.training.unclustered import unclustered

logger = logging.getLogger(__name__)


class QualityCurve(keras.callbacks.Callback):
    """Every `every_minutes` of `elapsed()` seconds, `evaluator.bleu()` and the logged loss as a point.

    Args:
        evaluator: a `DevEvaluator` (only its `bleu()` is called).
        every_minutes: minutes between points.
        write_points: `(points) -> None`, called with every point so far after each one.
        elapsed: `() -> float`, the session's seconds so far.
        offset_seconds: the run's training seconds before this session.
        points: the run's earlier points.
    """

    chief_only = True
    time_part = "quality points"

    def __init__(self, evaluator, every_minutes, write_points, elapsed, offset_seconds=0.0, points=()):
        super().__init__()
        self.evaluator, self.every_seconds, self.write_points = evaluator, every_minutes * 60, write_points
        self.elapsed, self.offset_seconds = elapsed, offset_seconds
        self.points = list(points)
        self._made = 0  # points made in this session
        self._last = None  # the session's seconds at its last point
        self._logs = {}

    def on_train_begin(self, logs=None):
        self._last = self.elapsed()

    def on_train_batch_end(self, batch, logs=None):
        self._logs = logs or {}
        if self.elapsed() - self._last >= self.every_seconds:
            self._point()

    def on_train_end(self, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if self._made and self.points[-1]["step"] != step:  # the curve ends at the session's last weights
            self._point()

    def _point(self):
        began = time.monotonic()
        bleu = unclustered(self.evaluator.bleu)()
        self._last = self.elapsed()
        loss = self._logs.get("loss")
        self.points.append({"minutes": round((self.offset_seconds + self._last) / 60, 3),
                            "step": int(self.model.optimizer.iterations.numpy()), "bleu": round(bleu, 2),
                            "loss": None if loss is None else round(float(loss), 4),
                            "seconds": round(time.monotonic() - began, 2)})
        self._made += 1
        self.write_points(self.points)
        logger.info("Quality point at %.1f min, step %d: dev BLEU %.2f on %d sentences (%.1f s).",
                    self.points[-1]["minutes"], self.points[-1]["step"], bleu, len(self.evaluator.sources),
                    self.points[-1]["seconds"])


def quality_curve(run, config, model, data, elapsed, offset_seconds):
    """`[QualityCurve]` for a translation run with a dev split when training.quality_every_minutes is set, else `[]`.

    Args:
        run: the `RunDirectory`; the points go to RUN/quality.json.
        config: the run's resolved config.
        model: the model being trained.
        data: the task's `RunData` (its tokenizer and dev pairs).
        elapsed: `() -> float`, the session's seconds so far.
        offset_seconds: the run's training seconds before this session.
    """
    t = config.training
    if not t.quality_every_minutes or not data.dev_pairs:
        if t.quality_every_minutes:
            logger.info("No quality curve: training.quality_every_minutes needs a translation run with a dev split.")
        return []
    pairs = sample_pairs(data.dev_pairs, t.quality_sentences, t.seed)
    request = GenerationRequest.from_config(config.decoding).updated(beam_size=1)
    evaluator = DevEvaluator(model, data.tokenizer, pairs, None, 0, None, request, jit_compile=model.jit_compile)
    earlier = (run.read_json(run.quality_path) or {}).get("points", [])

    def write_points(points):
        run.write_json(run.quality_path, {"sentences": len(pairs), "every_minutes": t.quality_every_minutes,
                                          "points": points})

    return [QualityCurve(evaluator, t.quality_every_minutes, write_points, elapsed, offset_seconds, earlier)]
