"""The checks of the decoding settings a `request.GenerationRequest` holds, one place each.

Each check returns the value in canonical form or raises `DecodingParameterError`
naming the parameter, its allowed range and the value received. The exported
SavedModel repeats the range checks inside the graph (`export.translator_module`),
for callers that reach it without Python.
"""

import math
import numbers

from t2t_keras.config import STOPPING_RULES
from t2t_keras.errors import T2TError

INT32_MAX = 2**31 - 1
MAX_SAMPLES = 256  # samples per line of one request (num_return when sampling)


class DecodingParameterError(T2TError):
    """A decoding parameter has the wrong type or is out of range."""


def check_integer(name, value, low=1, high=INT32_MAX, high_name=None):
    """`value` as an int in [low, high]; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        upper = f"{high_name}={high}" if high_name else str(high)
        raise DecodingParameterError(f"{name} must be an integer in [{low}, {upper}]. Received: {name}={value!r}")
    return int(value)


def check_stopping(rule):
    """`rule` if it is one of `STOPPING_RULES`, else ValueError naming them."""
    if rule not in STOPPING_RULES:
        raise ValueError(f"stopping must be one of {STOPPING_RULES}. Received: stopping={rule!r}")
    return rule


def check_beam_size(beam_size, max_beam_size=INT32_MAX):
    return check_integer("beam_size", beam_size, 1, max_beam_size)


def check_num_return(num_return, beam_size):
    return check_integer("num_return", num_return, 1, beam_size, "beam_size")


def check_samples(num_return):
    """The samples drawn per line (`num_return` when sampling), at most `MAX_SAMPLES`."""
    if isinstance(num_return, bool) or not isinstance(num_return, numbers.Integral) or not 1 <= num_return <= \
            MAX_SAMPLES:
        raise DecodingParameterError(f"num_return must be an integer in [1, {MAX_SAMPLES}] when sampling (the samples "
                                     f"drawn per line). Received: num_return={num_return!r}")
    return int(num_return)


def check_fraction(name, value, low, high, low_open, high_open, off):
    """`value` as a float in the interval from `low` to `high` (each end open or closed); `off` says which value
    turns the setting off, for the message."""
    inside = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
        low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    if not inside:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise DecodingParameterError(f"{name} must be a number in {interval} ({off}). Received: {name}={value!r}")
    return float(value)


def check_max_extra_length(max_extra_length):
    return check_integer("max_extra_length", max_extra_length, 0)


def check_alpha(alpha):
    """The length-penalty exponent as a float >= 0."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) or alpha < 0:
        raise DecodingParameterError(f"alpha must be a finite number >= 0. Received: alpha={alpha!r}")
    return float(alpha)
