"""A CTranslate2 export as an artifact: the same requests and answers as a SavedModel, CTranslate2 searching.

    artifact = CTranslate2Artifact("exports/base-ct2")
    artifact.generate(["A sentence."], artifact.request(beam_size=2))
    serve("exports/base-ct2")                                  # the same REST API

Decoding follows the SavedModel's conventions (see `export.translator_module`):

* inputs are SentencePiece pieces, cut to `max_length - 1` (and flagged
  `truncated`), followed by EOS; empty inputs translate to "" with score 0;
* a sentence generates at most input length + `max_extra_length` tokens,
  EOS included, and never more than `max_length`. CTranslate2's
  `max_decoding_length` is one number per call: a batch runs with its longest
  limit, and the few sentences whose output passes their own limit run again
  with it. That gives greedy search's exact result; beam search can differ
  where a hypothesis cut at its limit would have won, unless
  `exact_limits=True`, which runs beam search once per distinct limit
  (slower: sentences of one length per call);
* PAD and BOS are never generated (`suppress_sequences`; CTranslate2 then
  renormalises over the other tokens, so scores differ from the SavedModel's
  by the tiny probability the model gives those two tokens);
* an imported checkpoint's export (`ctranslate2_tokens.PretrainedTokens`) makes its tokens with the checkpoint's
  tokenizer, never generates its padding token, honours `max_output_length` and, for a multilingual model, takes
  `src_lang` and `tgt_lang` (the target language's code is the `target_prefix` of every translation). It does not
  score, and CTranslate2's beam search stops by its own rule (`end_at_limit` and the `"transformers"` stopping
  rules are the SavedModel's);
* sampling (`beam_size=1`, `temperature` > 0) is CTranslate2's: `sampling_temperature`, `sampling_topk` (0: the
  whole vocabulary), `sampling_topp`, `num_hypotheses` samples per sentence (sorted most likely first here), and
  a `seed` set with `ctranslate2.set_random_seed` for a Translator opened for the call (`_translator`: the same
  lines and seed give the same samples here, not the run's);
  `epsilon` is refused (`NO_EPSILON`);
* `beam_size=1` is greedy search scored by the plain log-probability;
  above 1, beam search ranks finished hypotheses by log P(Y) / |Y|^alpha
  (CTranslate2's length penalty; the SavedModel uses ((5 + |Y|) / 6)^alpha,
  the same for alpha = 0), |Y| counting EOS in both.
"""

import json
import pathlib

import numpy as np

from t2t_keras.artifacts.base import Artifact
from t2t_keras.artifacts.ctranslate2_tokens import PretrainedTokens, SentencePieceTokens
from t2t_keras.artifacts.signatures import described
from t2t_keras.config import DecodingConfig
from t2t_keras.decoding.quality_features import WITHOUT_DISTRIBUTIONS, features_from_token_log_probs
from t2t_keras.decoding.quality_model import QUALITY_ESTIMATE_FILE, read_quality_models
from t2t_keras.decoding.request import LANGUAGES, QUALITY, Generation, GenerationRequest, check_lines
from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_files import METADATA_FILE, PRETRAINED_TOKENIZER_FILE, TOKENIZER_FILE
from t2t_keras.switches.decisions import Decisions

ACCEPTS = frozenset({"beam_size", "alpha", "max_extra_length", "num_return", "temperature", "top_k", "top_p", "seed"})
UNSEEDED = 2**32 - 1  # CTranslate2's "no seed": each new thread seeds its generator at random
NO_EPSILON = ("CTranslate2 4.8.5 has no epsilon sampling, and its Translator takes no logits processor to add it "
              "(OpenNMT/CTranslate2 issue #1681): sample with --top-p or --top-k here, or use the run directory or "
              "its SavedModel for epsilon")


class CTranslate2Artifact(Artifact):
    """A directory written by `export_ctranslate2` (see the module docstring).

    Args:
        path: the CTranslate2 export directory.
        batch_size: most sentences per CTranslate2 batch; a call's sentences are split among the searches.
        threads: the CPU cores it translates on (None: every core the process may use), as that many concurrent
            searches of one thread each (`Decisions.ctranslate2_threads`: faster than one search on every core).
        compute_type: CTranslate2's compute type; "default" keeps the export's quantization.
        exact_limits: beam search with each sentence's own output limit (see the module docstring); greedy
            search always has it.
    """

    kind = "ctranslate2"
    task = "translation"
    signature_names = ("serving_default", "translate")

    def __init__(self, path, batch_size=32, threads=None, compute_type="default", exact_limits=False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1. Received: batch_size={batch_size}")
        self.path, self.batch_size, self.exact_limits = pathlib.Path(path), batch_size, exact_limits
        metadata = _read_metadata(self.path)
        ctranslate2 = _import_runtime()
        self.searches, intra_threads = Decisions.before_tensorflow().ctranslate2_threads(threads)
        self._runtime, self._options = ctranslate2, dict(device="cpu", compute_type=compute_type,
                                                         inter_threads=self.searches, intra_threads=intra_threads)
        self.translator = ctranslate2.Translator(str(self.path), **self._options)
        self.max_length, self.max_beam_size = int(metadata["max_length"]), DecodingConfig.max_beam_size
        pretrained = metadata.get("tokenizer") == "pretrained"
        self.tokens = (PretrainedTokens(self.path / PRETRAINED_TOKENIZER_FILE, self.max_length) if pretrained else
                       SentencePieceTokens(self.path / TOKENIZER_FILE, self.max_length))
        self.pieces = getattr(self.tokens, "processor", None)  # an export of ours: its SentencePiece model
        defaults = metadata["defaults"]
        self.defaults = GenerationRequest(int(defaults["beam_size"]), float(defaults["alpha"]),
                                          max_extra_length=int(defaults["max_extra_length"]),
                                          max_output_length=defaults.get("max_output_length"))
        self.accepts = ACCEPTS | (set(LANGUAGES) if self.tokens.languages else set())
        self.operations = frozenset({"generate"} if pretrained else {"generate", "score"})
        if not pretrained and (self.path / QUALITY_ESTIMATE_FILE).exists():  # the run's, copied by export
            self.quality_models = read_quality_models(self.path / QUALITY_ESTIMATE_FILE)[0]
            self.quality_features, self.accepts = WITHOUT_DISTRIBUTIONS, self.accepts | set(QUALITY)
        self.use_vmap = bool(metadata.get("shortlist", False))  # vmap.txt, the export's vocabulary shortlist

    def check_request(self, request):
        """`Artifact.check_request`, and epsilon refused with the reason."""
        if request.epsilon != self.defaults.epsilon:
            raise T2TError(f"epsilon (--epsilon) does not apply to {self.describe()}: {NO_EPSILON}.")
        return super().check_request(request)

    def generate(self, lines, request):
        """The `Generation` of `lines` under `request` (`self.request(...)`)."""
        lines, request = check_lines(lines), self.check_request(request)
        sources = self.tokens.sources(lines, request)
        # Output limit: input length (EOS included) + max_extra_length, within the model's max_length.
        longest = min(self.max_length, request.max_output_length or self.max_length)
        limits = [min(length + request.max_extra_length, longest) for length in sources.lengths]
        hypotheses, translator = {}, self._translator(request)
        try:
            self._search([i for i, p in enumerate(sources.tokens) if p], sources, limits, request, hypotheses,
                         translator)
        finally:
            if translator is not self.translator:
                self._runtime.set_random_seed(UNSEEDED)
        empty = ([""] * request.num_return, [0.0] * request.num_return)
        nbest = [self._nbest(hypotheses[i], request.num_return) if i in hypotheses else empty
                 for i in range(len(lines))]
        generation = Generation([n[0] for n in nbest], [n[1] for n in nbest], sources.truncated, None,
                                [None] * len(lines))
        return self.with_quality(lines, generation, request, self.batch_size)

    def piece_lengths(self, sentences):
        """Piece counts of `sentences` (no EOS), for `evaluation.scoring`."""
        return [len(p) for p in self.tokens.encode(sentences)]

    def _score_batch(self, sources, targets):
        """Forced decoding (CTranslate2's `score_batch`): sums `(n,)` and per-token NLL arrays, EOS included."""
        results = self.translator.score_batch(self.tokens.encode(sources), self.tokens.encode(targets),
                                              max_batch_size=self._call_batch(len(sources)), max_input_length=0)
        token_nll = [-np.asarray(r.log_probs, np.float32) for r in results]
        return np.array([t.sum() for t in token_nll]), token_nll

    def _quality_batch(self, sources, targets):
        """The features CTranslate2 gives (`quality_features.WITHOUT_DISTRIBUTIONS`) of `n` translations: token
        log-probabilities from `score_batch`, piece counts and unknown pieces from the export's SentencePiece model."""
        source_tokens, target_tokens = self.tokens.encode(sources), self.tokens.encode(targets)
        results = self.translator.score_batch(source_tokens, target_tokens,
                                              max_batch_size=self._call_batch(len(sources)),
                                              max_input_length=0)
        unknown = self.pieces.unk_id()
        rows = []
        for source, target, result in zip(source_tokens, target_tokens, results):
            unknowns = [sum(self.pieces.piece_to_id(piece) == unknown for piece in side) for side in (source, target)]
            rows.append(features_from_token_log_probs(result.log_probs, len(source), len(target), *unknowns))
        return rows

    def signature_defs(self):
        """Its inputs and outputs in TF Serving's metadata format (no SavedModel here)."""
        return described("translate", {"inputs": ("DT_STRING", [None]), "beam_size": ("DT_INT32", []),
                                       "alpha": ("DT_FLOAT", []), "max_extra_length": ("DT_INT32", []),
                                       "num_return": ("DT_INT32", [])},
                         {"translations": ("DT_STRING", [None, None]), "scores": ("DT_FLOAT", [None, None]),
                          "truncated": ("DT_BOOL", [None])})

    def _translator(self, request):
        """The export's `Translator`, or for a request that samples with a seed a new one, its worker threads
        started after `set_random_seed(seed)`: CTranslate2 seeds a thread's generator once, at the thread's first
        draw (OpenNMT/CTranslate2 issue #1757), so a seed takes hold in new threads only. It loads the model again:
        a seeded call costs a model load, and it searches one batch at a time (which of several concurrent
        searches draws for which batch would vary from call to call)."""
        if not request.sampling or request.seed is None:
            return self.translator
        self._runtime.set_random_seed(request.seed)
        return self._runtime.Translator(str(self.path), **dict(self._options, inter_threads=1))

    def _search(self, indices, sources, limits, request, hypotheses, translator):
        """Fills `hypotheses[i]` (CTranslate2 results) for `indices`, each within its own output limit."""
        if not indices:
            return
        if self.exact_limits and request.beam_size > 1:
            again = indices
        else:
            results = self._translate(translator, sources, indices, max(limits[i] for i in indices), request)
            hypotheses.update(zip(indices, results))
            again = [i for i, r in zip(indices, results) if any(len(h) > limits[i] for h in r.hypotheses)]
        for limit in sorted({limits[i] for i in again}):
            group = [i for i in again if limits[i] == limit]
            hypotheses.update(zip(group, self._translate(translator, sources, group, limit, request)))

    def _translate(self, translator, sources, indices, max_length, request):
        greedy = request.beam_size == 1
        prefix = {"target_prefix": [sources.target_prefix] * len(indices)} if sources.target_prefix else {}
        if request.sampling:  # CTranslate2's sampler: its top-k 0 is the whole vocabulary
            prefix.update(sampling_temperature=request.temperature, sampling_topk=request.top_k,
                          sampling_topp=request.top_p)
        return translator.translate_batch(
            [sources.tokens[i] for i in indices], max_batch_size=self._call_batch(len(indices)),
            beam_size=request.beam_size,
            num_hypotheses=request.num_return, length_penalty=0.0 if greedy else request.alpha,
            max_decoding_length=max_length, min_decoding_length=0, max_input_length=0, return_scores=True,
            return_end_token=True, suppress_sequences=self.tokens.never_generated, use_vmap=self.use_vmap, **prefix)

    def _call_batch(self, lines):
        """CTranslate2's `max_batch_size` for a call of `lines`: `batch_size`, or less, so that the call's lines
        give every one of its concurrent searches a batch (a served request of 8 lines runs as two of 4 on 2
        cores)."""
        return max(1, min(self.batch_size, -(-lines // self.searches)))

    def _nbest(self, result, num_return):
        """Texts and scores, best first (samples come in the order drawn), padded to `num_return`."""
        order = sorted(range(len(result.scores)), key=lambda i: -float(result.scores[i]))
        texts = self.tokens.texts([result.hypotheses[i] for i in order])
        scores = [float(result.scores[i]) for i in order]
        missing = num_return - len(texts)
        return texts + [""] * missing, scores + [float("-inf")] * missing


def _read_metadata(path):
    metadata_path = path / METADATA_FILE
    if not (path / "model.bin").exists() or not metadata_path.exists():
        raise T2TError(f"{path} is not a CTranslate2 export of t2t_keras (no model.bin or {METADATA_FILE}): "
                       "write one with `t2t-keras export --format ctranslate2`.")
    metadata = json.loads(metadata_path.read_text(encoding="utf-8"))
    name = PRETRAINED_TOKENIZER_FILE if metadata.get("tokenizer") == "pretrained" else TOKENIZER_FILE
    if not (path / name).exists():
        raise T2TError(f"{path / name} is missing: export the run again, or copy the run's {name} there.")
    return metadata


def _import_runtime():
    try:
        import ctranslate2
        import sentencepiece  # noqa: F401  (the tokens of an export of ours)
    except ImportError:
        raise T2TError("Translating with a CTranslate2 export needs ctranslate2 and sentencepiece: "
                       "pip install ctranslate2==4.8.5 sentencepiece.") from None
    return ctranslate2
