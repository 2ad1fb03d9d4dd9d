"""The Transformer's layers as single-stack models (the descendants the paper's architecture led to).

* `CausalLanguageModel`: decoder blocks without cross-attention, causal (GPT-style), cached generation
  with the same greedy, beam and sampling code as translation.
* `MaskedLanguageModel`: an encoder stack with a masked-LM head and a pooled output (BERT-style).
"""

from t2t_keras.language_models.causal_language_model import CausalLanguageModel
from t2t_keras.language_models.masked_language_model import MaskedLanguageModel

__all__ = ["CausalLanguageModel", "MaskedLanguageModel"]
