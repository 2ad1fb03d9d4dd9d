"""Scoring a trained run: translate a split (or given files) and compute BLEU/chrF."""

import logging
import time

from t2t_keras.data import sources
from t2t_keras.data.text_files import read_parallel_files, write_lines
from t2t_keras.decoding.ensemble import Ensemble
from t2t_keras.decoding.parameters import DecodingParams
from t2t_keras.decoding.translator import Translator
from t2t_keras.errors import ConfigError, check_applicable
from t2t_keras.evaluation.baseline import RetrievalTranslator
from t2t_keras.evaluation.bleu import score
from t2t_keras.runs import ensemble_runs, load_run, load_run_model, open_run

logger = logging.getLogger(__name__)


def run_translator(run_dir, model_source="auto", params=None, precision=None, shards=None, ensemble=(),
                   shortlist=None, translator=Translator, **options):
    """A `Translator` over the run's trained model and tokenizer.

    `run_dir`: a run directory, or an open `RunDirectory` (as every function here takes). `params`
    (`DecodingParams`), `precision` and `shards` left None come from the run's `decoding` section;
    `options` go to `Translator` (`stopping` from the run's `decoding.stopping` unless given). `ensemble`: more
    translation runs of the same vocabulary (`runs.ensemble_runs` checks them) whose models (the same
    `model_source` weights of each) decode with this run's as one `decoding.ensemble.Ensemble`. `shortlist` true
    searches over the run's vocabulary shortlist (RUN/shortlist.npz); not with an ensemble. `translator`: the class
    built, `Translator` or one taking its arguments (`decoding.constrained_translator.ConstrainedTranslator`).
    """
    run = open_run(run_dir)
    others = ensemble_runs(run, ensemble)
    if shortlist:
        check_applicable(["--shortlist"] if others else [],
                         "an ensemble: its members search their whole vocabulary; translate with one --run-dir")
        options["shortlist"] = run.load_shortlist()
    decoding = run.load_config().decoding
    options.setdefault("stopping", decoding.stopping)
    model, tokenizer = load_run(run, model_source)
    if others:
        model = Ensemble([model] + [load_run_model(other, model_source) for other in others])
    return translator(model, tokenizer, params or DecodingParams.from_config(decoding),
                     precision=decoding.precision if precision is None else precision,
                     shards=decoding.shards if shards is None else shards, **options)


def load_eval_pairs(run_dir, split="test", source=None, reference=None):
    """Sentence pairs to score: the run's `split`, or the files `source`/`reference`."""
    if source or reference:
        if not (source and reference):
            raise ConfigError("Give both --source and --reference, or neither (to score --split).")
        return read_parallel_files(source, reference)
    config = open_run(run_dir).load_config()
    pairs, _ = sources.load_pairs(config.data, split)
    return sources.as_string_pairs(pairs)


def evaluate_run(run_dir, split="test", source=None, reference=None, output=None, model_source="auto",
                 **decoding):
    """Translates the evaluation set with the run's model and scores it; returns the score dict.

    `decoding`: `params`, `precision`, `shards`, `ensemble` and `shortlist`, as `run_translator` takes them; an
    ensemble's result names its runs (`ensemble`), this one first.
    """
    run = open_run(run_dir)
    pairs = load_eval_pairs(run, split, source, reference)
    translator = run_translator(run, model_source, progress=True, **decoding)
    began = time.monotonic()
    hypotheses = translator.translate([s for s, _ in pairs])
    seconds = time.monotonic() - began
    if output:
        write_lines(output, hypotheses)
    config = run.load_config()
    result = score(hypotheses, [t for _, t in pairs], target_lang=config.data.target_lang)
    result.update(split=None if source else split, decode_seconds=round(seconds, 1),
                  method=translator.params.method, beam_size=translator.params.beam_size,
                  alpha=translator.params.alpha)
    if decoding.get("ensemble"):
        result.update(ensemble=[str(run.path)] + [str(open_run(other).path) for other in decoding["ensemble"]])
    return result


def evaluate_export(run_dir, exported, split="test", source=None, reference=None, output=None, params=None):
    """Translates the run's evaluation set with `exported` (an opened export, e.g. a `LiteRTTranslator`) and
    scores it, as `evaluate_run` does with the run's model; `params`: its `DecodingParams` (None: its defaults)."""
    run = open_run(run_dir)
    pairs = load_eval_pairs(run, split, source, reference)
    params = params or exported.defaults
    began = time.monotonic()
    hypotheses = exported.translate([s for s, _ in pairs], beam_size=params.beam_size, alpha=params.alpha,
                                    max_extra_length=params.max_extra_length)
    seconds = time.monotonic() - began
    if output:
        write_lines(output, hypotheses)
    result = score(hypotheses, [t for _, t in pairs], target_lang=run.load_config().data.target_lang)
    result.update(split=None if source else split, decode_seconds=round(seconds, 1), method=params.method,
                  beam_size=params.beam_size, alpha=params.alpha, export=str(exported.path))
    return result


BASELINE_DESCRIPTION = "retrieval (target of the most similar training source, TF-IDF cosine)"


def evaluate_baseline(run_dir, split="test"):
    """Scores the retrieval baseline on a split of the run's data; returns the score dict."""
    run = open_run(run_dir)
    train_pairs, pairs = load_eval_pairs(run, "train"), load_eval_pairs(run, split)
    hypotheses = RetrievalTranslator(train_pairs).translate([s for s, _ in pairs])
    target_lang = run.load_config().data.target_lang
    result = score(hypotheses, [t for _, t in pairs], target_lang=target_lang)
    result.update(split=split, baseline=BASELINE_DESCRIPTION)
    return result
