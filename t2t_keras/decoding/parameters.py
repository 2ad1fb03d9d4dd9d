"""Decoding parameters: their defaults, their one name each, and their checks, for every entry point.

`DecodingParams` is resolved once — the defaults here, then the run's `decoding`
config, then what the caller gave (an explicit 0 kept) — checked once, and handed
down unchanged to the translator, the SavedModel, CTranslate2 and the server:

    params = DecodingParams.from_config(config.decoding).updated(beam_size=args.beam_size)

One name per setting, from the config key (`decoding.max_extra_length`) to the
CLI flag (`--max-extra-length`), the Python argument and the REST request field.

Each check returns the value in canonical form or raises `DecodingParameterError`
naming the parameter, its allowed range and the value received. The exported
SavedModel repeats the range checks inside the graph (`export.translator_module`),
for callers that reach it without Python.
"""

import dataclasses
import math
import numbers

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding.length_penalty import check_length_penalty
from t2t_keras.errors import T2TError

METHODS = ("beam", "greedy")
INT32_MAX = 2**31 - 1


class DecodingParameterError(T2TError):
    """A decoding parameter has the wrong type or is out of range."""


def check_integer(name, value, low=1, high=INT32_MAX, high_name=None):
    """`value` as an int in [low, high]; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        upper = f"{high_name}={high}" if high_name else str(high)
        raise DecodingParameterError(f"{name} must be an integer in [{low}, {upper}]. Received: {name}={value!r}")
    return int(value)


def check_beam_size(beam_size, max_beam_size=INT32_MAX):
    return check_integer("beam_size", beam_size, 1, max_beam_size)


def check_num_return(num_return, beam_size):
    return check_integer("num_return", num_return, 1, beam_size, "beam_size")


def check_max_extra_length(max_extra_length):
    return check_integer("max_extra_length", max_extra_length, 0)


def check_alpha(alpha):
    """The length-penalty exponent as a float >= 0."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) or alpha < 0:
        raise DecodingParameterError(f"alpha must be a finite number >= 0. Received: alpha={alpha!r}")
    return float(alpha)


def check_method(method):
    if method not in METHODS:
        raise DecodingParameterError(f"method must be one of {METHODS}. Received: method={method!r}")
    return method


@dataclasses.dataclass(frozen=True)
class DecodingParams:
    """A search's settings (§6.1: "beam size of 4 and length penalty α = 0.6 … input length + 50"), checked.

    Equal parameters compare equal, so a server batches requests that share them.
    """

    # The defaults are the config's (config.DecodingConfig), written down once.
    beam_size: int = DecodingConfig.beam_size  # 1 is greedy search
    alpha: float = DecodingConfig.alpha  # length penalty ((5+|Y|)/6)^alpha of the beam search
    max_extra_length: int = DecodingConfig.max_extra_length  # output limit: input length + this (an lm: new pieces)
    num_return: int = 1  # best hypotheses returned per input (an export's n-best lists)

    def __post_init__(self):
        object.__setattr__(self, "beam_size", check_beam_size(self.beam_size))
        object.__setattr__(self, "alpha", float(check_alpha(self.alpha)))
        object.__setattr__(self, "max_extra_length", check_max_extra_length(self.max_extra_length))
        object.__setattr__(self, "num_return", check_num_return(self.num_return, self.beam_size))

    @property
    def method(self):
        """"greedy" for a beam of one, else "beam"."""
        return "greedy" if self.beam_size == 1 else "beam"

    @classmethod
    def from_config(cls, decoding):
        """The parameters a run's `decoding` config section sets."""
        return cls(decoding.beam_size, decoding.alpha, decoding.max_extra_length)

    def updated(self, **given):
        """These parameters with the `given` ones that are not None (0 is a value, not "unset"), checked."""
        unknown = sorted(set(given) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise DecodingParameterError(f"Unknown decoding parameters {unknown}: use beam_size, alpha, "
                                         "max_extra_length and num_return.")
        return dataclasses.replace(self, **{name: value for name, value in given.items() if value is not None})


DEFAULTS = DecodingParams()

__all__ = ["DEFAULTS", "DecodingParameterError", "DecodingParams", "METHODS", "check_alpha", "check_beam_size",
           "check_integer", "check_length_penalty", "check_max_extra_length", "check_method", "check_num_return"]
