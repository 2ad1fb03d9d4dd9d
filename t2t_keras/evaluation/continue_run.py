"""Prompt continuation with an lm run's model: `t2t-keras translate --run-dir` for `task: lm`."""

from t2t_keras.decoding.prompt_continuer import PromptContinuer
from t2t_keras.runs import load_run, open_run


def run_continuer(run_dir, model_source="auto", method=None, beam_size=None, alpha=None, max_extra_length=None,
                  temperature=None, top_k=None, seed=None):
    """A `PromptContinuer` over the run's model; unset options come from the run's `decoding` section.

    Greedy by default (a beam finds bland, repetitive continuations);
    `max_extra_length` (`decoding.extra_length`) is the number of new pieces.
    """
    run = open_run(run_dir)
    decoding = run.load_config().decoding
    model, tokenizer = load_run(run, model_source)
    if method is None:  # greedy unless a beam is asked for
        method = "beam" if beam_size and beam_size > 1 else "greedy"
    beam_size = beam_size or decoding.beam_size
    return PromptContinuer(model, tokenizer, method=method, beam_size=beam_size,
                           alpha=decoding.alpha if alpha is None else alpha,
                           max_new_tokens=max_extra_length or decoding.extra_length,
                           temperature=temperature or 0.0, top_k=top_k or 0, seed=seed)
