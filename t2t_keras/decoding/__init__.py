"""Decoding (§6.1): greedy and beam search over the key/value cache, uncached references, a batch translator,
and prompt continuation for causal language models."""

from t2t_keras.decoding.beam_search import beam_search
from t2t_keras.decoding.greedy import greedy_decode
from t2t_keras.decoding.length_penalty import LENGTH_PENALTIES, length_penalty, normalized_score
from t2t_keras.decoding.prompting import continue_prompts
from t2t_keras.decoding.reference import reference_beam_search, reference_greedy
from t2t_keras.decoding.translator import Translator

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
