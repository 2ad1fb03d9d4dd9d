"""Decoding (§6.1): greedy and beam search over the key/value cache, uncached references, a batch translator,
and prompt continuation for causal language models.

The searches exported here are TensorFlow's (`tf.while_loop`, compiled with XLA) and exist on the TensorFlow
backend. On every backend, JAX and PyTorch included, `neutral_greedy.greedy_search` and
`neutral_beam.beam_search` decode a `Transformer` with `keras.ops` (the same tokens); import those modules.
"""

import keras

from t2t_keras.backends import require_tensorflow_backend
from t2t_keras.decoding.length_penalty import LENGTH_PENALTIES, length_penalty, normalized_score  # every backend

__all__ = [
    "LENGTH_PENALTIES",
    "Translator",
    "beam_search",
    "continue_prompts",
    "greedy_decode",
    "length_penalty",
    "normalized_score",
    "reference_beam_search",
    "reference_greedy",
]

if keras.backend.backend() == "tensorflow":
    from t2t_keras.decoding.beam_search import beam_search
    from t2t_keras.decoding.greedy import greedy_decode
    from t2t_keras.decoding.prompting import continue_prompts
    from t2t_keras.decoding.reference import reference_beam_search, reference_greedy
    from t2t_keras.decoding.translator import Translator
else:
    def __getattr__(name):
        """The TensorFlow searches are missing on other backends: say so (submodules still import)."""
        if name in __all__:
            require_tensorflow_backend(f"t2t_keras.decoding.{name}", keras.backend.backend())
        raise AttributeError(f"module 't2t_keras.decoding' has no attribute {name!r}")
