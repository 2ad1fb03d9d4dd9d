"""Per-request "constraints" of the REST API: target terms each sentence's translation must hold.

    {"instances": ["the red house", "a cat"], "constraints": [["rotes Haus"], []]}
    {"inputs": ["the red house"], "constraints": [["rotes Haus"]], "params": {"beam_size": 4}}

One list of target terms per sentence, in order ([] for none), in the row or the columnar format. The export's
`translate_constrained` signature translates them (`export.constrained_module`): the request runs as a batch of
its own, with `num_return` 1. Its answer adds, per sentence, `satisfied` and `error`: null, or why its
translation ("") could not hold its terms (they need more pieces than the output limit allows, or hold
characters the vocabulary does not know); the request's other sentences translate all the same.
"""

from t2t_keras.export.constrained_loaded import UNSATISFIED, predict_constrained
from t2t_keras.export.loaded import finite


async def constrained_outputs(translator, batcher, parsed, params):
    """The answer's columns for a `rest_api.PredictRequest` with constraints, run in the model's thread."""
    result = await batcher.run_in_thread(predict_constrained, translator, parsed.sentences, parsed.constraints,
                                         params)
    return {
        "translations": result["translations"],
        "scores": [finite(score) for score in result["scores"]],
        "satisfied": result["satisfied"],
        "truncated": result["truncated"],
        "error": [None if ok else UNSATISFIED for ok in result["satisfied"]],
    }
