"""What each kind of model offers the parts that use it, declared once (`typing.Protocol`).

    Searchable   `decoding`'s cached searches (greedy, beam, prompt continuation) run on it
    Inspectable  `inspect` draws its encoder, decoder-self and cross attention

`Transformer` is both, `CausalLanguageModel` is searchable (its prompt is the
"source" it encodes), `MaskedLanguageModel` is neither; an `Ensemble` of
Transformers (`decoding.ensemble`) is searchable. A `Task` says what its
model supports (`output`, `attention_summary`); `tests/test_tasks.py` holds
those flags against these protocols, and `check_searchable` refuses, up front,
a model the searches cannot run.
"""

import typing

from t2t_keras.errors import T2TError


@typing.runtime_checkable
class Searchable(typing.Protocol):
    """A model the incremental searches decode with (see `decoding.common`)."""

    max_length: int
    vocab_size: int

    def source_mask(self, source): ...

    def encode(self, source, training=None): ...

    def init_cache(self, memory, max_length): ...

    def decode_step(self, tokens, cache, step, source_mask=None, training=False, growing=False): ...


@typing.runtime_checkable
class Inspectable(typing.Protocol):
    """A model whose three attention kinds `inspect` extracts."""

    def encode_with_attention(self, source, training=None): ...

    def decode_with_attention(self, target_in, memory, source_mask=None, training=None): ...


def check_searchable(model):
    """`model`, or a `T2TError` naming what a search needs of it."""
    if not isinstance(model, Searchable):
        raise T2TError(f"{type(model).__name__} cannot be searched: decoding needs a model with encode, "
                       "source_mask, init_cache and decode_step (a Transformer or a CausalLanguageModel).")
    return model
