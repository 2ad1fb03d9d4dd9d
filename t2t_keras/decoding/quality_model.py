"""The quality estimate's regressor: a logistic curve over standardised features, in [0, 1].

    model = QualityModel.fit(rows, chrf / 100, features=FEATURES)   # rows: dicts of name -> float
    model.predict(rows)                                              # numpy, one value per row
    model.in_graph({"mean_log_prob": tensor, ...})                   # the same inside a SavedModel

It is fitted to sentence-level chrF / 100 by Newton's method on the cross-entropy with those fractional targets
(convex: one optimum, reached in a few steps, whatever the order of the sentences), with a small L2 penalty on
the weights. A run keeps its models in `quality_estimate.json` (`QUALITY_ESTIMATE_FILE`, written by
`t2t-keras qe-train`): one per feature set, so that an artifact that cannot compute every feature (CTranslate2:
no output distributions) takes the largest set it can (`choose_model`).
"""

import dataclasses
import json

import numpy as np

from t2t_keras.errors import DataError, T2TError
from t2t_keras.files import write_text_atomic

QUALITY_ESTIMATE_FILE = "quality_estimate.json"  # in a run directory, and copied into its exports
FORMAT = 1
MIN_SENTENCES = 4  # fewer cannot say anything about a relation


@dataclasses.dataclass(frozen=True)
class QualityModel:
    """`sigmoid(sum_i weights[i] * (x[features[i]] - mean[i]) / scale[i] + bias)`."""

    features: tuple
    mean: tuple
    scale: tuple
    weights: tuple
    bias: float

    @classmethod
    def fit(cls, rows, targets, features, l2=1e-3, steps=50):
        """The model of `features` (names in each row of `rows`) that best predicts `targets` in [0, 1]."""
        targets = np.clip(np.asarray(targets, np.float64), 0.0, 1.0)
        if len(rows) < MIN_SENTENCES or len(rows) != len(targets):
            raise DataError(f"A quality estimate needs at least {MIN_SENTENCES} translated sentences with their "
                            f"references; got {len(rows)} rows and {len(targets)} targets.")
        x = _matrix(rows, features)
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale = np.where(scale > 1e-9, scale, 1.0)  # a constant feature keeps weight 0
        design = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
        theta = np.zeros(design.shape[1])
        penalty = np.full(design.shape[1], l2)
        penalty[-1] = 0.0  # the bias is not pulled to 0
        for _ in range(steps):
            p = _sigmoid(design @ theta)
            gradient = design.T @ (p - targets) / len(x) + penalty * theta
            hessian = (design.T * (p * (1 - p))) @ design / len(x) + np.diag(penalty + 1e-9)
            step = np.linalg.solve(hessian, gradient)
            theta -= step
            if np.abs(step).max() < 1e-10:
                break
        return cls(tuple(features), tuple(map(float, mean)), tuple(map(float, scale)), tuple(map(float, theta[:-1])),
                   float(theta[-1]))

    def predict(self, rows):
        """The estimate of each row (a dict holding at least `features`), float64 `(len(rows),)`."""
        if not rows:
            return np.zeros(0)
        x = (_matrix(rows, self.features) - np.asarray(self.mean)) / np.asarray(self.scale)
        return _sigmoid(x @ np.asarray(self.weights) + self.bias)

    def in_graph(self, columns):
        """The estimate as a float32 tensor `(batch,)` of `columns`, a dict of feature name -> float32 `(batch,)`."""
        import tensorflow as tf

        logit = tf.constant(self.bias, tf.float32)
        for name, mean, scale, weight in zip(self.features, self.mean, self.scale, self.weights):
            logit = logit + weight * (tf.cast(columns[name], tf.float32) - mean) / scale
        return tf.sigmoid(logit)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record):
        return cls(tuple(record["features"]), tuple(record["mean"]), tuple(record["scale"]),
                   tuple(record["weights"]), float(record["bias"]))


def write_quality_models(path, models, info):
    """Writes `models` (a list of `QualityModel`) and `info` (what they were trained on) as JSON, atomically."""
    record = {"format": FORMAT, "target": "sentence chrF / 100 (sacrebleu sentence_chrf)", **info,
              "models": [model.to_dict() for model in models]}
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def read_quality_models(path):
    """The `QualityModel`s of a `quality_estimate.json`, and its whole record; a damaged file is a T2TError."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return [QualityModel.from_dict(model) for model in record["models"]], record
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise T2TError(f"{path} is not a quality estimate t2t-keras qe-train wrote ({error}): train it again with "
                       "t2t-keras qe-train --run-dir RUN.") from None


def choose_model(models, available, where):
    """The model of `models` over the most features, all of them among `available`; `where` names the artifact."""
    usable = [model for model in models if set(model.features) <= set(available)]
    if not usable:
        raise T2TError(f"{where}: none of its quality estimates uses only the features it can compute "
                       f"({', '.join(available)}): train them again with t2t-keras qe-train --run-dir RUN.")
    return max(usable, key=lambda model: len(model.features))


def no_quality_estimate(what):
    """The refusal of --with-quality / --min-quality (REST "quality", "min_quality") without a quality estimate."""
    return (f"{what} has no quality estimate: train one with `t2t-keras qe-train --run-dir RUN` (then export the "
            "run again to carry it into an export).")


def _matrix(rows, features):
    try:
        values = [[float(row[name]) for name in features] for row in rows]
        return np.array(values, np.float64).reshape(-1, len(features))
    except KeyError as missing:
        raise T2TError(f"The quality estimate needs the feature {missing}, which these translations lack.") from None


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))
