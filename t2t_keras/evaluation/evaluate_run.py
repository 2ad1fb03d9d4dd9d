"""Scoring what an artifact translates: a run's split (or given files) translated and scored with BLEU/chrF."""

import dataclasses
import logging
import time

from t2t_keras.artifacts import open_artifact
from t2t_keras.data import sources
from t2t_keras.data.text_files import read_parallel_files, write_lines
from t2t_keras.errors import ConfigError, check_applicable, check_task
from t2t_keras.evaluation.baseline import RetrievalBaseline
from t2t_keras.evaluation.bleu import score
from t2t_keras.runs import open_run

logger = logging.getLogger(__name__)


def load_eval_pairs(run_dir, split="test", source=None, reference=None):
    """Sentence pairs to score: the run's `split`, or the files `source`/`reference`."""
    if source or reference:
        if not (source and reference):
            raise ConfigError("Give both --source and --reference, or neither (to score --split).")
        return read_parallel_files(source, reference)
    config = open_run(run_dir).load_config()
    pairs, _ = sources.load_pairs(config.data, split)
    return sources.as_string_pairs(pairs)


def evaluate(artifact, run_dir, split="test", source=None, reference=None, output=None, request=None,
             bleu="sacrebleu"):
    """Translates the run's `split` (or the files `source`/`reference`) with `artifact` (any kind that generates
    translations: the run itself, one of its exports) under `request` (None: its defaults), and scores it (`bleu`:
    the protocol of `bleu.score`); returns the score dict."""
    run = open_run(run_dir)
    pairs = load_eval_pairs(run, split, source, reference)
    request = artifact.check_request(request or artifact.defaults)
    if artifact.quality_models:  # a quality estimate (qe-train): how well it ranks the sentences, reported too
        request = artifact.check_request(dataclasses.replace(request, quality=True))
    began = time.monotonic()
    generation = artifact.generate([s for s, _ in pairs], request)
    hypotheses = generation.best
    seconds = time.monotonic() - began
    if output:
        write_lines(output, hypotheses)
    result = score(hypotheses, [t for _, t in pairs], target_lang=run.load_config().data.target_lang, bleu=bleu)
    result.update(split=None if source else split, decode_seconds=round(seconds, 1), method=request.method,
                  beam_size=request.beam_size, alpha=request.alpha)
    if generation.quality is not None:
        from t2t_keras.evaluation.quality_estimate import ranking, sentence_chrf_scores

        result.update(quality_estimate=ranking(generation.quality, sentence_chrf_scores(hypotheses,
                                                                                        [t for _, t in pairs])))
    if artifact.kind != "run":
        result.update(export=str(artifact.path))
    elif artifact.ensemble:
        result.update(ensemble=[str(run.path)] + [str(other.path) for other in artifact.ensemble])
    return result


def evaluate_run(run_dir, split="test", source=None, reference=None, output=None, model="auto", request=None,
                 **options):
    """`evaluate` of the run's own model (its `model` weights; `options`: `open_artifact`'s, e.g. `precision`,
    `ensemble`), with a progress bar."""
    return evaluate(open_artifact(run_dir, model, progress=True, **options), run_dir, split, source, reference,
                    output, request)


def evaluate_command(artifact, run_dir, split="test", source=None, reference=None, output=None, text=None,
                     bleu=None, **request_fields):
    """`t2t-keras evaluate`: a translation artifact's BLEU (`bleu`: "sacrebleu", the default, or "paper") and chrF
    on the run's split (`evaluate`, under its request with `request_fields`), or an lm or mlm run's perplexity
    (`language_model.evaluate_perplexity`)."""
    if artifact.task != "translation":
        from t2t_keras.evaluation.language_model import evaluate_perplexity

        given = [*request_fields, *(name for name, value in (("source", source), ("reference", reference),
                                                               ("output", output), ("bleu", bleu))
                                    if value is not None)]
        check_applicable([f"--{name.replace('_', '-')}" for name in given],
                         "an lm or mlm run, whose perplexity evaluate reports")
        return evaluate_perplexity(artifact, split, text)
    check_applicable(["--text"] if text is not None else [],
                     "a translation run: score it with --split, or --source and --reference")
    return evaluate(artifact, run_dir, split, source, reference, output, artifact.request(**request_fields),
                    "sacrebleu" if bleu is None else bleu)


def format_result(result):
    """The lines `evaluate` prints: BLEU and chrF, or perplexity."""
    from t2t_keras.evaluation.bleu import format_scores
    from t2t_keras.evaluation.language_model import format_perplexity

    if "perplexity" in result:
        return format_perplexity(result)
    if "quality_estimate" in result:
        from t2t_keras.evaluation.quality_estimate import format_correlation

        ranks = result["quality_estimate"]
        return (f"{format_scores(result)}\nquality estimate against sentence chrF: Pearson "
                f"{format_correlation(ranks['pearson'])}, Spearman {format_correlation(ranks['spearman'])}")
    return format_scores(result)


BASELINE_DESCRIPTION = "retrieval (target of the most similar training source, TF-IDF cosine)"


def evaluate_baseline(run_dir, split="test"):
    """Scores the retrieval baseline on a split of the run's data; returns the score dict."""
    run = open_run(run_dir)
    check_task("baseline", run.load_config().task, run.path)
    train_pairs, pairs = load_eval_pairs(run, "train"), load_eval_pairs(run, split)
    hypotheses = RetrievalBaseline(train_pairs).nearest_targets([s for s, _ in pairs])
    target_lang = run.load_config().data.target_lang
    result = score(hypotheses, [t for _, t in pairs], target_lang=target_lang)
    result.update(split=split, baseline=BASELINE_DESCRIPTION)
    return result
