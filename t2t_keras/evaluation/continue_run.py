"""Prompt continuation with an lm run's model: `t2t-keras translate --run-dir` for `task: lm`."""

from t2t_keras.decoding.parameters import DecodingParams
from t2t_keras.decoding.prompt_continuer import PromptContinuer
from t2t_keras.runs import load_run, open_run


def run_continuer(run_dir, model_source="auto", params=None, temperature=None, top_k=None, seed=None):
    """A `PromptContinuer` over the run's model.

    `params` (`DecodingParams`; `max_extra_length` is the number of new pieces) left None: the run's
    `decoding` section with a beam of one, greedy, since a beam finds bland, repetitive continuations.
    Sampling (`temperature` > 0, `top_k`, `seed`) applies to greedy search.
    """
    run = open_run(run_dir)
    params = params or DecodingParams.from_config(run.load_config().decoding).updated(beam_size=1)
    model, tokenizer = load_run(run, model_source)
    return PromptContinuer(model, tokenizer, params, temperature=0.0 if temperature is None else temperature,
                           top_k=0 if top_k is None else top_k, seed=seed)
