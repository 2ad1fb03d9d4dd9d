"""What every kind of artifact offers, written once: its request, its refusals, its batches, its scoring.

A kind (`run`, `saved_model`, `ctranslate2`, `litert`) sets what it is and declares what it takes:

    kind          "run", "saved_model", "ctranslate2" or "litert"
    path          where it was opened
    task          "translation", "lm" or "mlm"
    defaults      its `GenerationRequest`: a run's `decoding` config, an export's recorded defaults
    accepts       the request fields it honours
    operations    what it does: "generate", and "score" (forced decoding) where it can
    max_length    the longest sequence its model takes, in tokens, the end id included
    max_beam_size the largest beam it searches with

and implements `generate(lines, request) -> Generation` and, where it scores, `_score_batch(sources, targets)`.
A kind with a quality estimate (`t2t-keras qe-train`; `decoding.quality_model`) accepts the request's `quality` and
`min_quality` and either returns the estimates with its generation or computes them after it, `_quality_batch(sources,
targets) -> feature rows` under its `quality_models`; one without refuses them in one line naming qe-train.
Everything a caller needs beyond that is here: `request(**given)` resolves a request (its defaults, then the given
fields) and refuses, in one message, a field it does not honour; `require(operation)` refuses what it does not do.
A request with `mbr` set (minimum Bayes risk decoding) is answered here for every kind: its candidates' request is
the one checked and generated, in one call of the kind's `generate`, then `decoding.mbr` chooses per line.
"""

import numpy as np
import tqdm

from t2t_keras.decoding.batch_shapes import plan_batches
from t2t_keras.decoding.mbr import check_candidates, with_mbr
from t2t_keras.decoding.parameters import check_beam_size
from t2t_keras.decoding.quality_features import EXPECTED_UTILITY
from t2t_keras.decoding.quality_model import choose_model, no_quality_estimate
from t2t_keras.decoding.request import QUALITY, Score, check_accepted, joined, wants_quality
from t2t_keras.errors import T2TError, check_applicable

# How the kinds' `describe` names them.
KIND_NAMES = {"run": "run", "saved_model": "SavedModel", "ctranslate2": "CTranslate2 export", "litert": "LiteRT file"}


class Artifact:
    """The shared part of every kind (see the module docstring)."""

    operations = frozenset({"generate"})
    signature_names = ()  # the REST API's "signature_name" values it answers to
    quality_models = ()  # the `QualityModel`s of its quality estimate (none: it has no estimate)
    quality_features = ()  # the features it computes for them (`decoding.quality_features`)

    def __init_subclass__(cls, **kwargs):
        """A kind's own `generate` also answers MBR requests (`decoding.mbr.with_mbr`): written once, every kind."""
        super().__init_subclass__(**kwargs)
        if "generate" in vars(cls):
            cls.generate = with_mbr(cls.generate)

    def describe(self):
        """E.g. "exports/base, a translation SavedModel"."""
        article = "an" if self.task in ("lm", "mlm") else "a"
        return f"{self.path}, {article} {self.task} {KIND_NAMES[self.kind]}"

    def request(self, **given):
        """Its `defaults` with the `given` fields (None: the default), checked against what it accepts."""
        return self.check_request(self.defaults.updated(**given))

    def check_request(self, request):
        """`request` if it sets only fields the artifact honours, within its beam sizes; else a T2TError."""
        self.require("generate")
        if wants_quality(request) and not set(QUALITY) <= set(self.accepts):
            raise T2TError(no_quality_estimate(self.describe()))
        if request.mbr is not None:  # MBR: the request of its candidates is the one checked (decoding.mbr)
            self.check_request(check_candidates(request, self))
            return request
        check_accepted(request, self.defaults, self.accepts, self.describe())
        check_beam_size(request.beam_size, self.max_beam_size)
        return request

    def require(self, operation):
        """Refuses an `operation` ("generate", "score") the artifact does not do, naming what it does."""
        if operation not in self.operations:
            does = " and ".join(sorted(self.operations)) or "neither (a masked language model fills in masks)"
            hint = " t2t-keras evaluate reports the perplexity of lm and mlm runs." if self.kind == "run" else ""
            raise T2TError(f"{self.describe()} does not {operation}: it does {does}.{hint}")

    def limits(self):
        """What a caller may ask for, as a server's metadata lists it."""
        if self.task == "translation":
            return {"max_beam_size": self.max_beam_size, "max_source_length": self.max_length - 1}
        return {"max_length": self.max_length}

    def score(self, pairs, batch_tokens=4096, progress=None):
        """The `decoding.request.Score` of each pair, in input order; batches group pairs of similar length.

        Args:
            pairs: with `source`, `target`, `source_pieces` and `target_pieces` (`evaluation.scoring.ScorePair`).
            batch_tokens: padded tokens per batch (source or target, the longer).
            progress: show a tqdm bar; None shows one for more than 100 pairs.
        """
        self.require("score")
        lengths = np.array([max(p.source_pieces, p.target_pieces) + 1 for p in pairs])
        scores = [None] * len(pairs)
        show = len(pairs) > 100 if progress is None else progress
        with tqdm.tqdm(total=len(pairs), unit="pair", disable=not show) as bar:
            for batch in plan_batches(lengths, batch_tokens):
                sums, per_token = self._score_batch([pairs[i].source for i in batch], [pairs[i].target for i in batch])
                for index, total, values in zip(batch, sums, per_token):
                    scores[index] = Score(float(total), [float(v) for v in values])
                bar.update(len(batch))
        return scores

    def with_quality(self, lines, generation, request, batch_size=32):
        """`generation` with the estimate of each line's best text when `request` asks for it (and the generation
        does not hold it already), from `_quality_batch` on `batch_size` lines at a time."""
        if not wants_quality(request) or generation.quality is not None:
            return generation
        mbr = bool(getattr(request, "mbr", None))  # MBR decoding: a translation's score is its expected utility
        model = choose_model(self.quality_models, self.quality_features + ((EXPECTED_UTILITY,) if mbr else ()),
                             self.describe())
        rows = self.quality_rows(lines, generation.best, batch_size)
        if mbr:
            for row, scores in zip(rows, generation.scores):
                row[EXPECTED_UTILITY] = float(scores[0])
        return generation._replace(quality=[float(value) for value in model.predict(rows)])

    def quality_rows(self, sources, translations, batch_size=32):
        """The quality-estimate features of each translation of `sources`, as dicts (`decoding.quality_features`),
        `batch_size` pairs at a time."""
        rows = []
        for start in range(0, len(sources), batch_size):
            rows += self._quality_batch(sources[start:start + batch_size], translations[start:start + batch_size])
        return rows

    def _quality_batch(self, sources, targets):
        """The quality-estimate features of `n` translations, as dicts (`decoding.quality_features`)."""
        raise T2TError(f"{self.describe()} cannot compute the quality estimate's features: use --with-quality and "
                       "--min-quality with a run, a SavedModel or a CTranslate2 export.")


def in_chunks(lines, size, num_return, generate_chunk):
    """One `Generation` of `lines` from `generate_chunk(chunk)` called on `size` lines at a time."""
    parts = [(range(start, start + len(lines[start:start + size])), generate_chunk(lines[start:start + size]))
             for start in range(0, len(lines), size)]
    return joined(parts, len(lines), num_return)


def check_options(what, taken, **given):
    """Refuses the open options `given` (not None) that a kind does not take (`taken`), in one message."""
    check_applicable([f"--{name.replace('_', '-')}" for name, value in given.items()
                      if value is not None and name not in taken], what)
