"""Training and measuring the quality estimate a translation carries (`decoding.quality_model`).

    result = train_quality_estimate("runs/base")          # t2t-keras qe-train: the dev set, RUN/quality_estimate.json
    ranking(estimates, sentence_chrf_scores(hyps, refs))   # {"pearson": ..., "spearman": ...}

`qe-train` translates the run's dev set (or given files) with the run's own model and its decoding defaults,
computes each translation's features (`decoding.quality_features`) and its sentence-level chrF against the
reference (sacreBLEU's `sentence_chrf`), and fits one model over every feature and one over those CTranslate2
can compute (no output distributions); both go into the run's `quality_estimate.json`, which `export` carries
into its SavedModels (an output `quality`) and CTranslate2 directories (the file beside the model).
"""

import numpy as np

from t2t_keras.artifacts import open_artifact
from t2t_keras.decoding.quality_features import EXPECTED_UTILITY, FEATURES, WITHOUT_DISTRIBUTIONS
from t2t_keras.decoding.quality_model import QUALITY_ESTIMATE_FILE, QualityModel, write_quality_models
from t2t_keras.errors import ConfigError, check_task
from t2t_keras.evaluation.evaluate_run import load_eval_pairs
from t2t_keras.runs import open_run

BASELINE_FEATURE = "mean_log_prob"  # the bare length-normalised log-probability


def train_quality_estimate(run_dir, split="dev", source=None, reference=None, limit=None, progress=True,
                           **request_fields):
    """Fits the run's quality estimate on its `split` (or the files `source`/`reference`), the first `limit`
    pairs (None: all), translated under the run's request with `request_fields` (e.g. `mbr="chrf"`: then the
    expected utility is a feature too), and writes RUN/quality_estimate.json atomically; returns what
    `format_training` prints."""
    run = open_run(run_dir)
    check_task("qe-train", run.load_config().task, run.path)
    try:
        pairs = load_eval_pairs(run, split, source, reference)[:limit]
    except ConfigError as error:  # e.g. a run without a dev set
        raise ConfigError(f"{error} qe-train: or give the dev set's files as --source and --reference.") from None
    artifact = open_artifact(run.path, progress=progress)
    artifact.require("score")  # an ensemble of runs has no single model to read
    request = artifact.request(**request_fields)
    generation = artifact.generate([s for s, _ in pairs], request)
    rows = artifact.quality_rows([s for s, _ in pairs], generation.best)
    sets = [FEATURES, WITHOUT_DISTRIBUTIONS]
    if getattr(request, "mbr", None):  # MBR decoding: the chosen candidate's expected utility is its score
        for row, scores in zip(rows, generation.scores):
            row[EXPECTED_UTILITY] = float(scores[0])
        sets = [names + (EXPECTED_UTILITY,) for names in sets] + sets
    chrf = sentence_chrf_scores(generation.best, [t for _, t in pairs])
    models = [QualityModel.fit(rows, chrf / 100.0, names) for names in sets]
    fitted = ranking(models[0].predict(rows), chrf)
    baseline = ranking([row[BASELINE_FEATURE] for row in rows], chrf)
    info = {"run": str(run.path), "split": None if source else split, "sentences": len(pairs),
            "method": request.method, "beam_size": request.beam_size, "mbr": getattr(request, "mbr", None),
            "fit": fitted, "baseline_fit": baseline}
    path = run.path / QUALITY_ESTIMATE_FILE
    write_quality_models(path, models, info)
    return dict(info, path=str(path), features=list(models[0].features))


def format_training(result):
    """The lines `qe-train` prints."""
    fit, baseline = result["fit"], result["baseline_fit"]
    return (f"wrote {result['path']}: {len(result['features'])} features, {result['sentences']} sentences "
            f"({result['split'] or 'given files'}); on them the estimate's Pearson with sentence chrF is "
            f"{format_correlation(fit['pearson'])}, Spearman {format_correlation(fit['spearman'])} (the bare "
            f"length-normalised log-probability: {format_correlation(baseline['pearson'])}, "
            f"{format_correlation(baseline['spearman'])})")


def format_correlation(value):
    """A correlation with 3 decimals, or "n/a" (a constant side)."""
    return "n/a" if value is None else f"{value:.3f}"


def sentence_chrf_scores(hypotheses, references):
    """sacreBLEU's sentence-level chrF (0-100) of each hypothesis against its one reference, float64."""
    from sacrebleu import sentence_chrf

    return np.array([sentence_chrf(h, [r]).score for h, r in zip(hypotheses, references)], np.float64)


def ranking(estimates, scores):
    """How well `estimates` rank the sentences as `scores` do: Pearson and Spearman correlations (None where one
    side is constant or there are fewer than 2 sentences)."""
    estimates, scores = np.asarray(estimates, np.float64), np.asarray(scores, np.float64)
    return {"pearson": _pearson(estimates, scores), "spearman": _pearson(_ranks(estimates), _ranks(scores)),
            "sentences": int(len(scores))}


def _pearson(a, b):
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def _ranks(values):
    """Ranks from 1, ties given their mean rank (as Spearman's coefficient takes them)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks
