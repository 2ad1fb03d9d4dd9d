"""Scoring a trained run: translate a split (or given files) and compute BLEU/chrF."""

import logging
import time

from t2t_keras.data import sources
from t2t_keras.data.text_files import read_parallel_files
from t2t_keras.data.tokenizer import Tokenizer, check_vocab_size
from t2t_keras.decoding.translator import Translator
from t2t_keras.errors import ConfigError
from t2t_keras.evaluation.bleu import score
from t2t_keras.training.averaging import load_run_model
from t2t_keras.training.run_directory import RunDirectory

logger = logging.getLogger(__name__)


def run_translator(run_dir, model_source="auto", **options):
    """A `Translator` over the run's trained model and tokenizer; `options` go to `Translator`."""
    run = RunDirectory(run_dir)
    config = run.load_config()
    decoding = config.decoding
    defaults = dict(beam_size=decoding.beam_size, alpha=decoding.alpha, max_extra_length=decoding.extra_length)
    defaults.update({k: v for k, v in options.items() if v is not None})
    model, tokenizer = load_run_model(run_dir, model_source), Tokenizer.load(run.tokenizer_path)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    return Translator(model, tokenizer, **defaults)


def load_eval_pairs(run_dir, split="test", source=None, reference=None):
    """Sentence pairs to score: the run's `split`, or the files `source`/`reference`."""
    if source or reference:
        if not (source and reference):
            raise ConfigError("Give both --source and --reference, or neither (to score --split).")
        return read_parallel_files(source, reference)
    config = RunDirectory(run_dir).load_config()
    pairs, _ = sources.load_pairs(config.data, split)
    if not isinstance(pairs, list):
        pairs = [(s.decode("utf-8"), t.decode("utf-8")) for s, t in pairs.as_numpy_iterator()]
    return pairs


def evaluate_run(run_dir, split="test", source=None, reference=None, output=None, model_source="auto",
                 **decoding):
    """Translates the evaluation set with the run's model and scores it; returns the score dict."""
    pairs = load_eval_pairs(run_dir, split, source, reference)
    translator = run_translator(run_dir, model_source, progress=True, **decoding)
    began = time.monotonic()
    hypotheses = translator.translate([s for s, _ in pairs])
    seconds = time.monotonic() - began
    if output:
        from t2t_keras.data.text_files import write_lines

        write_lines(output, hypotheses)
    config = RunDirectory(run_dir).load_config()
    result = score(hypotheses, [t for _, t in pairs], target_lang=config.data.target_lang)
    result.update(split=None if source else split, decode_seconds=round(seconds, 1),
                  method=translator.method, beam_size=translator.beam_size, alpha=translator.alpha)
    return result
