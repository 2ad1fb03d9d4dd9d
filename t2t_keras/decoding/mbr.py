"""Minimum Bayes risk (MBR) decoding: of N candidate translations of a line, the one the others agree with most.

    choice = choose_candidate(["Ein Haus.", "Ein Haus!", "Eine Maus."], "chrf")
    choice.index, choice.expected_utility          # 0 (or 1), its mean chrF against the other two

A candidate's expected utility is its mean utility against the other candidates taken as pseudo-references: the
pair of a candidate with itself is left out, so with N candidates it is the mean of N - 1 values (duplicate
candidates, as sampling gives them, count as the separate draws they are). The candidate with the highest expected
utility is chosen, the first of equals in the search's order (beam search: best first). Utilities:

    chrf   sentence chrF (character 6-grams, beta 2, 0..100), from `fastchrf` (the same values as sacreBLEU's)
    bleu   sentence BLEU (sacreBLEU's sentence_bleu: 13a tokens, exp smoothing, effective order, 0..100)

Pairwise utilities cost N^2 per line and are computed one line at a time, so no more than one line's N x N
matrix is ever held. With `aggregate` (reference aggregation, Vamvas and Sennrich 2024, "Linear-time Minimum
Bayes Risk Decoding with Reference Aggregation") each candidate is scored once against one pseudo-reference whose
n-gram statistics are the mean of all N candidates' (itself included, as in the paper): N utilities per line
instead of N^2, an approximation of the pairwise ranking. For chrF this is `fastchrf.aggregate_chrf`; for BLEU
the same averaging of word n-gram counts and of the reference length, scored by sacreBLEU's BLEU formula.

Generation: a request with `mbr` set is answered by one generate call for the candidates (`candidate_request`:
beam search with a beam of N returning N, or N samples at temperature 1 with epsilon 0.02 as Freitag et al. 2023,
"Epsilon Sampling Rocks"), then the chosen text per line with its expected utility as its score (`chosen`).
Every kind of artifact answers it the same way (`artifacts.base.Artifact` wraps each kind's `generate` with
`with_mbr`). The utilities and the chooser (`pairwise_utilities` to `choose_candidate`) take strings or arrays
and use no TensorFlow.
"""

import dataclasses
import functools
import math
from typing import NamedTuple

import numpy as np

from t2t_keras.decoding.parameters import DecodingParameterError, check_integer
from t2t_keras.errors import T2TError

UTILITIES = ("chrf", "bleu")  # the `mbr` request field's values
CANDIDATE_SOURCES = ("sample", "beam")  # where the candidates come from (`candidates_from`)
DEFAULT_CANDIDATES = 8  # N: 8 beam candidates or samples, 64 pairwise utilities per line
DEFAULT_SOURCE = "sample"  # epsilon samples: the candidates of Freitag et al. 2023's WMT results
SAMPLING_EPSILON = 0.02  # epsilon of sampled candidates when the request sets no truncation (Freitag et al. 2023)
SAMPLING_TEMPERATURE = 1.0  # temperature of sampled candidates when the request's is 0
TRUNCATIONS = ("top_k", "top_p", "epsilon")  # sampling fields that choose which pieces are drawn from
MBR_FIELDS = ("mbr", "candidates", "candidates_from", "mbr_aggregate")  # the request fields of MBR
AFTER_CHOICE = ("quality", "min_quality")  # fields read of the chosen text, not of the candidates


class MBRChoice(NamedTuple):
    """The chosen candidate's index among a line's candidates, and its expected utility."""

    index: int
    expected_utility: float


def pairwise_utilities(candidates, utility):
    """`(N, N)` float array: entry `[i, j]` is the `utility` ("chrf" or "bleu") of candidate i against candidate j
    as its reference."""
    _check_utility(utility)
    candidates = list(candidates)
    if utility == "chrf":
        import fastchrf

        return np.array(fastchrf.pairwise_chrf([candidates], [candidates])[0], dtype=np.float64)
    stats = [_bleu_ngrams(text) for text in candidates]
    return np.array([[_bleu_score(hypothesis, reference) for reference in stats] for hypothesis in stats])


def aggregate_utilities(candidates, utility):
    """`(N,)` float array: each candidate's `utility` against the aggregate of all N candidates (reference
    aggregation: one pseudo-reference of averaged n-gram statistics)."""
    _check_utility(utility)
    candidates = list(candidates)
    if utility == "chrf":
        import fastchrf

        return np.array(fastchrf.aggregate_chrf([candidates], [candidates])[0], dtype=np.float64)
    stats = [_bleu_ngrams(text) for text in candidates]
    mean_counts = {}
    for counts, _ in stats:
        for ngram, count in counts.items():
            mean_counts[ngram] = mean_counts.get(ngram, 0.0) + count / len(stats)
    reference = (mean_counts, sum(length for _, length in stats) / len(stats))
    return np.array([_bleu_score(hypothesis, reference) for hypothesis in stats], dtype=np.float64)


def expected_from_matrix(utilities):
    """`(N,)`: each row's mean over the other columns, the diagonal (a candidate against itself) left out."""
    utilities = np.asarray(utilities, dtype=np.float64)
    count = utilities.shape[0]
    if utilities.ndim != 2 or utilities.shape[1] != count or count < 2:
        raise ValueError(f"expected a square matrix of at least 2 x 2 utilities. Received shape {utilities.shape}")
    return (utilities.sum(axis=1) - np.diagonal(utilities)) / (count - 1)


def choose(expected):
    """The `MBRChoice` of the highest expected utility in `expected` (the first of equals)."""
    expected = np.asarray(expected, dtype=np.float64)
    index = int(np.argmax(expected))
    return MBRChoice(index, float(expected[index]))


def expected_utilities(candidates, utility, aggregate=False):
    """`(N,)`: each candidate's expected utility (see the module docstring), for one line's N >= 2 candidates."""
    if aggregate:
        return aggregate_utilities(candidates, utility)
    return expected_from_matrix(pairwise_utilities(candidates, utility))


def choose_candidate(candidates, utility, aggregate=False):
    """The `MBRChoice` among one line's candidates: candidates in, (chosen index, expected utility) out."""
    return choose(expected_utilities(candidates, utility, aggregate))


def check_mbr_fields(request):
    """Refuses MBR fields of a `GenerationRequest` that are malformed or clash with its other fields."""
    if request.mbr is not None and request.mbr not in UTILITIES:
        raise DecodingParameterError(f"mbr must be one of {UTILITIES} (or left out). Received: mbr={request.mbr!r}")
    check_integer("candidates", request.candidates, 2)
    if request.candidates_from not in CANDIDATE_SOURCES:
        raise DecodingParameterError(f"candidates_from must be one of {CANDIDATE_SOURCES}. Received: "
                                     f"candidates_from={request.candidates_from!r}")
    if not isinstance(request.mbr_aggregate, bool):
        raise DecodingParameterError(f"mbr_aggregate must be true or false. Received: mbr_aggregate="
                                     f"{request.mbr_aggregate!r}")
    if request.mbr is None:
        given = [f"--{name.replace('_', '-')}" for name in MBR_FIELDS[1:]
                 if getattr(request, name) != getattr(type(request), name)]
        if given:
            raise DecodingParameterError(f"{', '.join(given)} only apply with --mbr chrf or --mbr bleu: add it, or "
                                         f"leave {'it' if len(given) == 1 else 'them'} out.")
        return
    _check_mbr_clashes(request)


def _check_mbr_clashes(request):
    if request.num_return != 1:
        raise DecodingParameterError(f"--mbr returns one translation per line, the chosen one. Received: num_return="
                                     f"{request.num_return}: leave --num-return out.")
    if request.alignments:
        raise DecodingParameterError("--mbr does not give alignments: leave --alignments and --markup out.")
    sampling = _sampling_given(request)
    if request.candidates_from == "beam" and sampling:
        raise DecodingParameterError(f"{', '.join(sampling)} only apply to sampled candidates: use --candidates-from "
                                     "sample, or leave them out.")
    candidate_request(request)  # the request that searches, checked as any other


def candidate_request(request):
    """The request of one generate call that gives `request`'s N candidates per line, the MBR fields cleared."""
    cleared = {name: getattr(type(request), name) for name in MBR_FIELDS + AFTER_CHOICE}
    if request.candidates_from == "beam":
        return dataclasses.replace(request, beam_size=request.candidates, num_return=request.candidates, **cleared)
    temperature = request.temperature if request.temperature > 0 else SAMPLING_TEMPERATURE
    sampling = {"temperature": temperature}
    if not [name for name in _sampling_given(request) if name in TRUNCATIONS]:
        sampling["epsilon"] = SAMPLING_EPSILON
    return dataclasses.replace(request, beam_size=1, num_return=request.candidates, **sampling, **cleared)


def check_candidates(request, artifact):
    """Refuses, in one line, an MBR `request` whose candidates `artifact` (its `defaults`, `accepts`,
    `max_beam_size`, `describe()`) cannot produce; returns `candidate_request(request)`."""
    defaults, accepts, what = artifact.defaults, artifact.accepts, artifact.describe()
    if request.beam_size != defaults.beam_size:
        raise T2TError(f"--beam-size does not apply with --mbr: the candidates come from --candidates N (with "
                       f"--candidates-from beam, a beam of N). Received: beam_size={request.beam_size}")
    candidates = candidate_request(request)
    if "num_return" not in accepts:
        raise T2TError(f"{what} returns one translation per line, and --mbr needs {request.candidates} candidates "
                       "per line (num_return): use a translation run, SavedModel or CTranslate2 export.")
    if request.candidates_from == "beam" and request.candidates > artifact.max_beam_size:
        raise T2TError(f"{what} searches beams of at most {artifact.max_beam_size}, and --candidates-from beam "
                       f"needs a beam of {request.candidates}: give --candidates {artifact.max_beam_size} or fewer, "
                       "or sample them.")
    needed = [name for name in ("temperature",) + TRUNCATIONS
              if getattr(candidates, name) != getattr(defaults, name) and name not in accepts]
    if request.candidates_from == "sample" and needed:
        raise T2TError(f"{what} cannot sample --mbr candidates: it does not take {', '.join(needed)} (sampled "
                       f"candidates use temperature {SAMPLING_TEMPERATURE:g} and epsilon {SAMPLING_EPSILON:g} "
                       "unless given): use --candidates-from beam.")
    return candidates


def chosen(generation, request):
    """The `Generation` of the MBR choice per line out of `generation`, the candidates of `request`: each line's
    chosen text with its expected utility as its score (a line without a translation keeps its first entry)."""
    texts, scores = [], []
    for line_texts, line_scores, error in zip(generation.texts, generation.scores, generation.errors):
        if error is not None or len(line_texts) < 2:
            texts.append(list(line_texts[:1]))
            scores.append(list(line_scores[:1]))
            continue
        choice = choose_candidate(line_texts, request.mbr, request.mbr_aggregate)
        texts.append([line_texts[choice.index]])
        scores.append([choice.expected_utility])
    return generation._replace(texts=texts, scores=scores, alignments=None)


def with_mbr(generate):
    """A kind's `generate(artifact, lines, request)` that also answers requests with `mbr` set: it checks them
    (`artifact.check_request`), generates the candidates in one call and returns `chosen`, with the quality
    estimate of the chosen texts where the request asks for it (`artifact.with_quality`)."""

    @functools.wraps(generate)
    def generate_or_choose(artifact, lines, request):
        if request.mbr is None:
            return generate(artifact, lines, request)
        artifact.check_request(request)
        return artifact.with_quality(lines, chosen(generate(artifact, lines, candidate_request(request)), request),
                                     request)

    return generate_or_choose


def _sampling_given(request):
    """The sampling fields of `request` set apart from their defaults."""
    return [name for name in ("temperature",) + TRUNCATIONS if getattr(request, name) != getattr(type(request), name)]


def _check_utility(utility):
    if utility not in UTILITIES:
        raise DecodingParameterError(f"The MBR utility must be one of {UTILITIES}. Received: {utility!r}")


@functools.lru_cache(maxsize=1)
def _bleu_metric():
    """sacreBLEU's sentence BLEU (the settings of `sacrebleu.sentence_bleu`)."""
    from sacrebleu.metrics import BLEU

    return BLEU(effective_order=True)


def _bleu_ngrams(text):
    """`(Counter of word 1..4-grams, length)` of `text` in sacreBLEU's 13a tokens."""
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    metric = _bleu_metric()
    return extract_all_word_ngrams(metric.tokenizer(text.rstrip()), 1, metric.max_ngram_order)


def _bleu_score(hypothesis, reference):
    """Sentence BLEU of `(ngrams, length)` against a reference's `(ngram counts, length)` (counts may be means)."""
    metric = _bleu_metric()
    order = metric.max_ngram_order
    reference_counts = reference[0]
    correct, total = [0] * order, [0] * order
    for ngram, count in hypothesis[0].items():
        total[len(ngram) - 1] += count
        correct[len(ngram) - 1] += min(count, reference_counts.get(ngram, 0))
    # sacreBLEU's formula with the brevity penalty applied here: an aggregate's reference length is a mean, not
    # the integer its score object formats.
    precisions = metric.compute_bleu(correct, total, hypothesis[1], hypothesis[1], smooth_method=metric.smooth_method,
                                     smooth_value=metric.smooth_value, effective_order=True, max_ngram_order=order)
    return precisions.score * _brevity_penalty(hypothesis[1], reference[1])


def _brevity_penalty(length, reference_length):
    """BLEU's brevity penalty (as `sacrebleu.BLEU.compute_bleu`): exp(1 - r / c) for an output shorter than r."""
    if length >= reference_length:
        return 1.0
    return math.exp(1 - reference_length / length) if length > 0 else 0.0
