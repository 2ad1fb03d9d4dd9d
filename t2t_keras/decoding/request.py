"""What a caller asks of a generation, resolved once, and what every kind of artifact answers.

    request = artifact.request(beam_size=2, num_return=2)   # its defaults, then the given fields, checked
    generation = artifact.generate(["A sentence."], request)
    generation.texts[0]                                     # ["Ein Satz.", "Einen Satz."], best first

A `GenerationRequest` is frozen and resolved in one order: the defaults below (the config's, written down
once), then the artifact's own (a run's `decoding` config, an export's recorded defaults), then the fields the
caller gives (flags, a REST request's "params"), an explicit 0 kept. It then travels down unchanged to whatever
searches: a run's generator, a SavedModel's signatures, CTranslate2, the LiteRT interpreter. One name per
setting, from the config key (`decoding.max_extra_length`) to the CLI flag (`--max-extra-length`), the request
field and the REST "params" key.

An artifact declares the fields it honours (`accepts`); giving another is one refusal, `check_accepted`, with
the same words for every kind (e.g. `temperature` for a LiteRT file, `constraints` for a CTranslate2
export). Equal requests compare equal, so a server batches requests that share one.
"""

import dataclasses
import math
from typing import NamedTuple, Optional

from t2t_keras.config import ALIGNMENT_ROWS, LENGTH_PENALTIES, DecodingConfig
from t2t_keras.decoding.mbr import DEFAULT_CANDIDATES, DEFAULT_SOURCE, check_mbr_fields
from t2t_keras.decoding.parameters import (
    DecodingParameterError,
    check_alpha,
    check_beam_size,
    check_fraction,
    check_integer,
    check_max_extra_length,
    check_num_return,
    check_samples,
    check_stopping,
)
from t2t_keras.errors import T2TError, check_applicable

SHORTLIST_WITH_TERMS = "A vocabulary shortlist does not apply to a search with terms: translate without it."
# The fields a search's shape depends on (the others choose numbers inside one search, or what is read after).
SEARCH_FIELDS = ("beam_size", "alpha", "length_penalty", "max_extra_length", "stopping", "max_output_length",
                 "end_at_limit", "num_return", "temperature", "top_k", "top_p", "epsilon", "seed")
SAMPLING = ("temperature", "top_k", "top_p", "epsilon", "seed")  # the sampler's fields (`decoding.sampling`)


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """A generation's settings (§6.1: "beam size of 4 and length penalty α = 0.6 … input length + 50"), checked.

    Per line of a call, `constraints` holds that line's target terms; the other fields apply to every line.
    """

    beam_size: int = DecodingConfig.beam_size  # 1 is greedy search (or sampling, with a temperature)
    alpha: float = DecodingConfig.alpha  # the length penalty's exponent
    length_penalty: str = DecodingConfig.length_penalty  # "gnmt": ((5+|Y|)/6)^alpha; "power": |Y|^alpha; ...
    max_extra_length: int = DecodingConfig.max_extra_length  # output limit: input length + this (an lm: new pieces)
    stopping: str = DecodingConfig.stopping  # when a beam search is done with a sentence (decoding.stopping)
    max_output_length: Optional[int] = DecodingConfig.max_output_length  # output limit whatever the input (None: none)
    end_at_limit: bool = DecodingConfig.end_at_limit  # a hypothesis at its limit ends with the end id
    num_return: int = 1  # hypotheses returned per line, best first (sampling: the samples drawn per line)
    temperature: float = 0.0  # sampling (beam_size 1 only): softmax(log p / temperature); 0 is argmax
    top_k: int = 0  # sampling: among the k most likely pieces (0: all)
    top_p: float = 1.0  # sampling: among the most likely pieces whose probabilities sum to top_p (nucleus; 1: off)
    epsilon: float = 0.0  # sampling: among the pieces of probability >= epsilon, the most likely kept (0: off)
    seed: Optional[int] = None  # sampling: repeatable draws, >= 0 (None: a fresh seed per call)
    constraints: Optional[tuple] = None  # per line, a tuple of target terms its translation must hold
    alignments: bool = False  # also the word alignments of each line's best translation (decoding.alignment)
    alignment_layer: int = DecodingConfig.alignment_layer  # the decoder layer read for alignments
    alignment_heads: Optional[tuple] = None  # the heads averaged (None: all)
    alignment_rows: str = DecodingConfig.alignment_rows  # a target word's attention: the step outputting it, or reading
    src_lang: Optional[str] = None  # a multilingual model's source language code (None: the run's, chosen at import)
    tgt_lang: Optional[str] = None  # its target language code, forced as the first output token (None: the run's)
    quality: bool = False  # also each line's quality estimate in [0, 1] (t2t-keras qe-train; decoding.quality_model)
    min_quality: Optional[float] = None  # a line whose estimate is below it is withheld by the caller (None: none)
    mbr: Optional[str] = None  # minimum Bayes risk: "chrf" or "bleu" chooses among candidates (decoding.mbr)
    candidates: int = DEFAULT_CANDIDATES  # mbr: candidates per line, generated in one call
    candidates_from: str = DEFAULT_SOURCE  # mbr: "sample" (epsilon sampling) or "beam" (a beam of N)
    mbr_aggregate: bool = False  # mbr: each candidate against the candidates' aggregate (linear in N)

    def __post_init__(self):
        _set(self, "beam_size", check_beam_size(self.beam_size))
        _set(self, "alpha", check_alpha(self.alpha))
        _set(self, "max_extra_length", check_max_extra_length(self.max_extra_length))
        if self.max_output_length is not None:
            _set(self, "max_output_length", check_integer("max_output_length", self.max_output_length))
        if not isinstance(self.end_at_limit, bool):
            raise DecodingParameterError(f"end_at_limit must be true or false. Received: end_at_limit="
                                         f"{self.end_at_limit!r}")
        for name in ("src_lang", "tgt_lang"):
            _check_language(name, getattr(self, name))
        _set(self, "top_k", check_integer("top_k", self.top_k, 0))
        _set(self, "temperature", _check_temperature(self.temperature))
        if self.mbr is None:  # an MBR request's sampling is checked on the request of its candidates (decoding.mbr)
            _check_sampling(self)
        if self.seed is not None:
            _set(self, "seed", check_integer("seed", self.seed, 0))
        _check_choice("length_penalty", self.length_penalty, LENGTH_PENALTIES)
        _check_choice("alignment_rows", self.alignment_rows, ALIGNMENT_ROWS)
        check_stopping(self.stopping)
        _set(self, "constraints", _checked_constraints(self.constraints))
        check_mbr_fields(self)
        _check_quality(self.quality, self.min_quality)
        if self.alignment_heads is not None:
            _set(self, "alignment_heads", tuple(self.alignment_heads))

    @property
    def sampling(self):
        """Whether the search draws samples: greedy search (a beam of one) at a temperature above 0."""
        return self.beam_size == 1 and self.temperature > 0

    @property
    def method(self):
        """"greedy" for a beam of one, else "beam"."""
        return "greedy" if self.beam_size == 1 else "beam"

    @classmethod
    def from_config(cls, decoding):
        """The request a run's `decoding` config section makes."""
        return cls(beam_size=decoding.beam_size, alpha=decoding.alpha, length_penalty=decoding.length_penalty,
                   max_extra_length=decoding.max_extra_length, stopping=decoding.stopping,
                   max_output_length=decoding.max_output_length, end_at_limit=decoding.end_at_limit,
                   alignment_layer=decoding.alignment_layer, alignment_rows=decoding.alignment_rows,
                   alignment_heads=None if decoding.alignment_heads is None else tuple(decoding.alignment_heads))

    def updated(self, **given):
        """This request with the `given` fields that are not None (0 is a value, not "unset"), checked."""
        unknown = sorted(set(given) - set(FIELDS))
        if unknown:
            raise DecodingParameterError(f"Unknown request fields {unknown}: a request takes {', '.join(FIELDS)}.")
        return dataclasses.replace(self, **{name: value for name, value in given.items() if value is not None})

    def search_key(self):
        """The fields a traced search depends on, as a hashable tuple (a generator's cache of searches)."""
        return tuple(getattr(self, name) for name in SEARCH_FIELDS)

    def given(self, defaults):
        """The names of the fields set to something else than in `defaults`."""
        return [name for name in FIELDS if getattr(self, name) != getattr(defaults, name)]


class Generation(NamedTuple):
    """What `generate` answers for `n` lines, one entry per line, in input order.

    `texts`: `num_return` strings, best first ("" where the line failed); `scores`: their floats (the
    log-probability for greedy search, the length-normalised score of a beam search; -inf where none);
    `truncated`: whether the input was cut to the model's length; `alignments`: with `request.alignments`, the
    best text's word links `[(source word, target word), ...]`, else None; `errors`: None, or why the line has no
    translation (a constraint that does not fit).
    """

    texts: list
    scores: list
    truncated: list
    alignments: Optional[list]
    errors: list
    quality: Optional[list] = None  # with `request.quality` or `min_quality`: the best text's estimate per line

    @property
    def best(self):
        """The best text of each line."""
        return [texts[0] for texts in self.texts]


@dataclasses.dataclass(frozen=True)
class Score:
    """What `score` answers per pair (forced decoding, `decoding.forced`): the negative log-likelihood of one
    translation, `nll` in nats, over `len(token_nll)` tokens (EOS included)."""

    nll: float
    token_nll: list

    @property
    def nll_per_token(self):
        return self.nll / len(self.token_nll)


def empty_generation(count, num_return):
    """The generation of `count` lines with no tokens: "" with score 0, nothing truncated."""
    return Generation([[""] * num_return for _ in range(count)], [[0.0] * num_return for _ in range(count)],
                      [False] * count, None, [None] * count)


def joined(parts, count, num_return):
    """One `Generation` of `count` lines from `(indices, Generation)` parts: line `indices[i]` is part line i; the
    lines of no part are empty ones."""
    out = empty_generation(count, num_return)
    alignments = [None] * count if any(part.alignments is not None for _, part in parts) else None
    quality = [None] * count if any(part.quality is not None for _, part in parts) else None
    for indices, part in parts:
        for line, i in enumerate(indices):
            out.texts[i], out.scores[i], out.truncated[i] = part.texts[line], part.scores[line], part.truncated[line]
            out.errors[i] = part.errors[line]
            if alignments is not None:
                alignments[i] = None if part.alignments is None else part.alignments[line]
            if quality is not None:
                quality[i] = None if part.quality is None else part.quality[line]
    return out._replace(alignments=alignments, quality=quality)


def check_lines(lines):
    """`lines` as a list of str; a single string, or an item that is not a str, is a T2TError saying so."""
    if isinstance(lines, (str, bytes)):
        raise T2TError("lines must be a list of str, not a single string: wrap it in a list.")
    lines = list(lines)
    for index, line in enumerate(lines):
        if not isinstance(line, str):
            raise T2TError(f"lines[{index}] is a {type(line).__name__}, not a str: pass text only.")
    return lines


def check_accepted(request, defaults, accepts, what):
    """Refuses the fields of `request` set apart from `defaults` that an artifact does not honour (`accepts`).

    `what` names the artifact, e.g. "exports/base, a translation SavedModel". The one refusal of every kind."""
    refused = [name for name in request.given(defaults) if name not in accepts]
    why = NO_LANGUAGES if set(refused) & set(LANGUAGES) else ""
    check_applicable([f"{name} ({FLAGS.get(name, '--' + name.replace('_', '-'))})" for name in refused],
                     f"{what}, which takes {', '.join(sorted(accepts)) or 'no generation settings'}{why}")
    return request


# The command line's flags of the fields not named after them (the others: --field-name).
FLAGS = {"constraints": "--terminology", "alignments": "--alignments, --markup", "src_lang": "--source-lang",
         "tgt_lang": "--target-lang", "quality": "--with-quality"}
QUALITY = ("quality", "min_quality")  # the fields of the quality estimate
LANGUAGES = ("src_lang", "tgt_lang")  # the fields of a multilingual model's languages
NO_LANGUAGES = ("; src_lang and tgt_lang choose among the language codes of a multilingual checkpoint (NLLB, "
                "M2M-100), and this model has none: leave them out")


def _set(request, name, value):
    object.__setattr__(request, name, value)


def _check_choice(name, value, choices):
    if value not in choices:
        raise DecodingParameterError(f"{name} must be one of {tuple(choices)}. Received: {name}={value!r}")


def _check_language(name, code):
    if code is not None and (not isinstance(code, str) or not code.strip()):
        raise DecodingParameterError(f"{name} must be a language code such as eng_Latn (a non-empty string), or "
                                     f"left out for the model's own. Received: {name}={code!r}")


def _check_quality(quality, min_quality):
    if not isinstance(quality, bool):
        raise DecodingParameterError(f"quality must be true or false. Received: quality={quality!r}")
    if min_quality is not None and (isinstance(min_quality, bool) or not isinstance(min_quality, (int, float))
                                    or not 0.0 <= min_quality <= 1.0):
        raise DecodingParameterError(f"min_quality must be a number in [0, 1] (the estimate's range), or left out. "
                                     f"Received: min_quality={min_quality!r}")


def wants_quality(request):
    """Whether `request` asks for the quality estimate (`quality`, or a `min_quality` to compare it with)."""
    return request.quality or request.min_quality is not None


def below_quality(generation, min_quality):
    """The indices of the lines of `generation` whose estimate is below `min_quality` (None: none)."""
    if min_quality is None or generation.quality is None:
        return []
    return [i for i, value in enumerate(generation.quality) if value is not None and value < min_quality]


def _check_sampling(request):
    """`num_return`, `top_p` and `epsilon` checked: up to `MAX_SAMPLES` samples when sampling, else at most the
    beam; sampling takes a beam of one; the cuts apply only when sampling."""
    _set(request, "top_p", check_fraction("top_p", request.top_p, 0, 1, True, False, "1 is off"))
    _set(request, "epsilon", check_fraction("epsilon", request.epsilon, 0, 1, False, True, "0 is off"))
    if request.temperature > 0 and request.beam_size > 1:
        raise DecodingParameterError(f"Sampling (temperature {request.temperature:g}) draws one piece at a time: it "
                                     f"takes beam_size 1, not {request.beam_size}. Set beam_size 1 to sample, or "
                                     "temperature 0 for beam search.")
    cuts = [name for name, off in (("top_p", 1.0), ("epsilon", 0.0)) if getattr(request, name) != off]
    if cuts and request.temperature == 0:
        raise DecodingParameterError(f"{' and '.join(cuts)} only apply when sampling: give a temperature above 0 "
                                     "(1 samples from the model's own distribution), or leave them out.")
    if request.sampling:
        _set(request, "num_return", check_samples(request.num_return))
    elif isinstance(request.num_return, int) and request.beam_size == 1 and request.num_return > 1:
        raise DecodingParameterError(f"num_return={request.num_return} with beam_size 1 and temperature 0 would "
                                     "repeat one argmax translation: sample with a temperature above 0, or search "
                                     "a beam of at least num_return.")
    else:
        _set(request, "num_return", check_num_return(request.num_return, request.beam_size))


def _check_temperature(temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(
            temperature) or temperature < 0:
        raise DecodingParameterError(f"temperature must be a finite number >= 0. Received: temperature="
                                     f"{temperature!r}")
    return float(temperature)


def _checked_constraints(constraints):
    """Per line, a tuple of non-blank target terms without tabs or line breaks (None: no constraints)."""
    if constraints is None:
        return None
    if isinstance(constraints, (str, bytes)) or not isinstance(constraints, (list, tuple)):
        raise DecodingParameterError("constraints must be a list with one list of target terms per line, e.g. "
                                     "[[\"rotes Haus\"], []].")
    rows = []
    for index, terms in enumerate(constraints):
        if isinstance(terms, (str, bytes)) or not isinstance(terms, (list, tuple)) or not all(
                isinstance(term, str) for term in terms):
            raise DecodingParameterError(f"constraints[{index}] must be a list of strings (target terms), possibly "
                                         "empty.")
        for term in terms:
            if not term.strip() or "\t" in term or "\n" in term:
                raise DecodingParameterError(f"constraints[{index}] holds {term!r}: a target term must be non-blank "
                                             "text without tabs or line breaks.")
        rows.append(tuple(terms))
    return tuple(rows)


FIELDS = tuple(field.name for field in dataclasses.fields(GenerationRequest))
DEFAULTS = GenerationRequest()
ALIGNMENT_DETAILS = ("alignment_layer", "alignment_heads", "alignment_rows")  # how alignments are read


def check_alignment_details(given, aligned):
    """Refuses the alignment settings among the field names `given` when no alignments are asked for (`aligned`:
    --alignments or --markup)."""
    named = [f"--{name.replace('_', '-')}" for name in ALIGNMENT_DETAILS if name in given]
    if named and not aligned:
        raise T2TError(f"{', '.join(named)} only apply with --alignments or --markup: add one of them, or leave "
                       f"{'it' if len(named) == 1 else 'them'} out.")
