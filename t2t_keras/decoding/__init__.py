"""Decoding (§6.1): greedy and beam search over the key/value cache, and the run's generator.

The searches (`greedy_decode`, `beam_search`, and constrained decoding through a `beam_search.BeamRule`) are
written once, in `keras.ops`, and run on every Keras backend over fixed shapes; on TensorFlow they also run in
graph mode over a growing cache. Batching strings through a tokenizer (`generator`), sampling and prompt
continuation are TensorFlow's. (The tests check the searches against uncached references of their own,
tests/reference_search.py.)
"""

import keras

from t2t_keras.backends import require_tensorflow_backend
from t2t_keras.decoding.beam_search import beam_search  # every backend
from t2t_keras.decoding.greedy import greedy_decode  # every backend
from t2t_keras.decoding.length_penalty import LENGTH_PENALTIES, length_penalty, normalized_score  # every backend

TENSORFLOW_ONLY = ("Generator", "continue_prompts")

__all__ = ["LENGTH_PENALTIES", "Generator", "beam_search", "continue_prompts", "greedy_decode", "length_penalty",
           "normalized_score"]

if keras.backend.backend() == "tensorflow":
    from t2t_keras.decoding.generator import Generator
    from t2t_keras.decoding.prompting import continue_prompts
else:
    def __getattr__(name):
        """The TensorFlow-only parts are missing on other backends: say so (submodules still import)."""
        if name in TENSORFLOW_ONLY:
            require_tensorflow_backend(f"t2t_keras.decoding.{name}", keras.backend.backend())
        raise AttributeError(f"module 't2t_keras.decoding' has no attribute {name!r}")
