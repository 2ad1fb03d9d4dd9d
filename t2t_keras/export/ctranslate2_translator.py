"""Translating with a CTranslate2 export, behind the same interface as `SavedModelTranslator`.

    translator = CTranslate2Translator("exports/base-ct2")
    translator.translate(["A sentence."], beam_size=2)
    serve("exports/base-ct2", translator_class=CTranslate2Translator)   # the same REST API

Decoding follows the SavedModel's conventions (see `translator_module`):

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
* `beam_size=1` is greedy search scored by the plain log-probability;
  above 1, beam search ranks finished hypotheses by log P(Y) / |Y|^alpha
  (CTranslate2's length penalty; the SavedModel uses ((5 + |Y|) / 6)^alpha,
  the same for alpha = 0), |Y| counting EOS in both.
"""

import json
import pathlib

import numpy as np

from t2t_keras.errors import T2TError
from t2t_keras.export.ctranslate2_export import METADATA_FILE, SPECIAL_PIECES, TOKENIZER_FILE
from t2t_keras.decoding.parameters import DecodingParams
from t2t_keras.export.loaded import TranslatorBase, _checked_sentences
from t2t_keras.export.translator_module import MAX_BEAM_SIZE

EOS_PIECE = "</s>"
NEVER_GENERATED = [[SPECIAL_PIECES[0]], [SPECIAL_PIECES[2]]]  # PAD and BOS


class CTranslate2Translator(TranslatorBase):
    """Translates lists of strings with a directory written by `export_ctranslate2`.

    Args:
        path: the CTranslate2 export directory.
        batch_size: most sentences per CTranslate2 call.
        threads: CPU threads of one translation (0: CTranslate2's default).
        compute_type: CTranslate2's compute type; "default" keeps the
            export's quantization.
        exact_limits: beam search with each sentence's own output limit
            (see the module docstring); greedy search always has it.

    Attributes:
        translator: the `ctranslate2.Translator`.
        defaults: the export's default `DecodingParams`.
        max_beam_size: largest beam size accepted (as a SavedModel export's default).
        max_source_length: longest input in pieces; longer ones are cut and flagged.
    """

    kind = "ctranslate2"

    def __init__(self, path, batch_size=32, threads=0, compute_type="default", exact_limits=False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1. Received: batch_size={batch_size}")
        self.path = pathlib.Path(path)
        self.batch_size = batch_size
        self.exact_limits = exact_limits
        metadata = _read_metadata(self.path)
        ctranslate2, sentencepiece = _import_runtime()
        self.translator = ctranslate2.Translator(str(self.path), device="cpu", compute_type=compute_type,
                                                 intra_threads=threads)
        self.pieces = sentencepiece.SentencePieceProcessor(model_file=str(self.path / TOKENIZER_FILE))
        self.max_length = int(metadata["max_length"])
        self.max_source_length = self.max_length - 1
        self.max_beam_size = MAX_BEAM_SIZE
        defaults = metadata["defaults"]
        self.defaults = DecodingParams(int(defaults["beam_size"]), float(defaults["alpha"]),
                                       int(defaults["max_extra_length"]))
        self.use_vmap = bool(metadata.get("shortlist", False))  # vmap.txt, the export's vocabulary shortlist

    def predict(self, sentences, params=None):
        """n-best translations with scores and truncation flags, as `SavedModelTranslator.predict`."""
        sentences = _checked_sentences(sentences)
        params = params or self.defaults
        pieces = self.pieces.encode(sentences, out_type=str) if sentences else []
        truncated = [len(p) > self.max_source_length for p in pieces]
        pieces = [p[:self.max_source_length] for p in pieces]
        # Output limit: input length (EOS included) + max_extra_length, within the model's max_length.
        limits = [min(len(p) + 1 + params.max_extra_length, self.max_length) for p in pieces]
        hypotheses = {}
        self._search([i for i, p in enumerate(pieces) if p], pieces, limits, params, hypotheses)
        empty = {"translations": [""] * params.num_return, "scores": [0.0] * params.num_return}
        nbest = [self._nbest(hypotheses[i], params.num_return) if i in hypotheses else empty
                 for i in range(len(sentences))]
        return {"translations": [n["translations"] for n in nbest], "scores": [n["scores"] for n in nbest],
                "truncated": truncated}

    def piece_lengths(self, sentences):
        """Piece counts of `sentences` (no EOS), for `evaluation.scoring`."""
        return [len(p) for p in self.pieces.encode(sentences)] if sentences else []

    def score_batch(self, sources, targets):
        """Forced decoding (CTranslate2's `score_batch`): sums `(n,)` and per-token NLL arrays, EOS included."""
        results = self.translator.score_batch(self.pieces.encode(sources, out_type=str),
                                              self.pieces.encode(targets, out_type=str),
                                              max_batch_size=self.batch_size, max_input_length=0)
        token_nll = [-np.asarray(r.log_probs, np.float32) for r in results]
        return np.array([t.sum() for t in token_nll]), token_nll

    def signature_defs(self):
        """A description of the inputs and outputs in TF Serving's metadata format (no SavedModel here)."""
        scalar = {"dim": [], "unknown_rank": False}

        def info(dtype, rank):
            return {"dtype": dtype, "tensor_shape": scalar if rank == 0 else
                    {"dim": [{"size": "-1"}] * rank, "unknown_rank": False}}

        inputs = {"inputs": info("DT_STRING", 1), "beam_size": info("DT_INT32", 0), "alpha": info("DT_FLOAT", 0),
                  "max_extra_length": info("DT_INT32", 0), "num_return": info("DT_INT32", 0)}
        outputs = {"translations": info("DT_STRING", 2), "scores": info("DT_FLOAT", 2),
                   "truncated": info("DT_BOOL", 1)}
        return {"translate": {"inputs": inputs, "outputs": outputs, "method_name": "tensorflow/serving/predict"}}

    def _search(self, indices, pieces, limits, params, hypotheses):
        """Fills `hypotheses[i]` (CTranslate2 results) for `indices`, each within its own output limit."""
        if not indices:
            return
        if self.exact_limits and params.beam_size > 1:
            again = indices
        else:
            results = self._translate([pieces[i] for i in indices], max(limits[i] for i in indices), params)
            hypotheses.update(zip(indices, results))
            again = [i for i, r in zip(indices, results) if any(len(h) > limits[i] for h in r.hypotheses)]
        for limit in sorted({limits[i] for i in again}):
            group = [i for i in again if limits[i] == limit]
            hypotheses.update(zip(group, self._translate([pieces[i] for i in group], limit, params)))

    def _translate(self, batch, max_length, params):
        greedy = params.beam_size == 1
        return self.translator.translate_batch(
            batch, max_batch_size=self.batch_size, beam_size=params.beam_size, num_hypotheses=params.num_return,
            length_penalty=0.0 if greedy else params.alpha, max_decoding_length=max_length,
            min_decoding_length=0, max_input_length=0, return_scores=True, return_end_token=True,
            suppress_sequences=NEVER_GENERATED, use_vmap=self.use_vmap)

    def _nbest(self, result, num_return):
        texts = [self.pieces.decode_pieces([t for t in tokens if t != EOS_PIECE]) for tokens in result.hypotheses]
        scores = [float(s) for s in result.scores]
        missing = num_return - len(texts)
        return {"translations": texts + [""] * missing, "scores": scores + [float("-inf")] * missing}


def _read_metadata(path):
    metadata_path = path / METADATA_FILE
    if not (path / "model.bin").exists() or not metadata_path.exists():
        raise T2TError(f"{path} is not a CTranslate2 export of t2t_keras (no model.bin or {METADATA_FILE}): "
                       "write one with `t2t-keras export --format ctranslate2`.")
    if not (path / TOKENIZER_FILE).exists():
        raise T2TError(f"{path / TOKENIZER_FILE} is missing: export the run again, or copy the run's "
                       "tokenizer.model there.")
    return json.loads(metadata_path.read_text(encoding="utf-8"))


def _import_runtime():
    try:
        import ctranslate2
        import sentencepiece
    except ImportError:
        raise T2TError("Translating with a CTranslate2 export needs ctranslate2 and sentencepiece: "
                       "pip install ctranslate2==4.8.5 sentencepiece.") from None
    return ctranslate2, sentencepiece
