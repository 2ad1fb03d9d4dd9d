"""Decoding (§6.1): greedy and beam search over the key/value cache, and the run's generator.

The searches (`greedy_decode`, `beam_search`, and constrained decoding through a `beams.BeamRule`) are
written once, in `keras.ops`, and run on every Keras backend over fixed shapes; on TensorFlow they also run in
graph mode over a growing cache. Batching strings through a tokenizer (`generator`), sampling and prompt
continuation are TensorFlow's. (The tests check the searches against uncached references of their own,
tests/reference_search.py.)

Importing the package imports neither Keras nor TensorFlow: each name below is loaded on first use. What a
request is (`request`, `parameters`, `mbr`), how lines are batched (`batch_shapes.plan_batches`) and how a
quality estimate is made from log-probabilities (`quality_features`, `quality_model`) serve the CTranslate2
artifact too, whose process needs neither.
"""

import importlib

from t2t_keras.backends import require_tensorflow_backend
from t2t_keras.config import LENGTH_PENALTIES

_MODULES = {"beam_search": "beams", "greedy_decode": "greedy", "length_penalty": "length_normalization",
            "normalized_score": "length_normalization", "Generator": "generator", "continue_prompts": "prompting"}
TENSORFLOW_ONLY = ("Generator", "continue_prompts")

__all__ = ["LENGTH_PENALTIES", "Generator", "beam_search", "continue_prompts", "greedy_decode", "length_penalty",
           "normalized_score"]


def __getattr__(name):
    """The searches (every backend) and the TensorFlow-only parts, imported when first asked for; on another
    backend the TensorFlow-only parts say so (submodules still import)."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in TENSORFLOW_ONLY:
        import keras

        require_tensorflow_backend(f"t2t_keras.decoding.{name}", keras.backend.backend())
    value = getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    globals()[name] = value
    return value
