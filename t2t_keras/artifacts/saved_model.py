"""A SavedModel written by `t2t-keras export` as an artifact: its signatures called in batches.

    artifact = SavedModelArtifact("exports/base")
    artifact.generate(["A sentence."], artifact.request(beam_size=2, num_return=2))

A translation export answers through `translate` (n-best lists), `sample` (a request that samples, `temperature`
> 0: where the export has the signature, every export since sampling existed), `translate_constrained` (a request
with constraints, where the export has the signature: `export --constraints`) and `score`; an lm export through
`continue`. A multilingual export (NLLB, M2M-100) also takes the request's `src_lang` and `tgt_lang`, checked here
against the export's `language_codes` before the call. The export is loaded with `tf.saved_model.load` after
importing `tensorflow_text`, which registers the tokenizer's ops, and called `batch_size` lines at a time. An
XLA-compiled export gets batches padded to a power-of-two number of rows (repeating the first line), so it
compiles for few shapes. Alignments read the
cross-attention of the Keras model a text export keeps in `assets.extra/` (`runs.load_export`).
"""

import json
import pathlib

import tensorflow as tf

from t2t_keras.artifacts.base import Artifact, in_chunks
from t2t_keras.artifacts.signatures import signature_defs
from t2t_keras.decoding.aligner import Aligner
from t2t_keras.decoding.batch_shapes import pad_rows_to_power_of_two
from t2t_keras.decoding.constraint_rows import UNSATISFIED_IN_EXPORT
from t2t_keras.decoding.generator import ALIGNMENT, SAMPLING
from t2t_keras.decoding.layout import unknown_language
from t2t_keras.decoding.quality_features import WITHOUT_DISTRIBUTIONS, features_from_token_log_probs
from t2t_keras.decoding.quality_model import QualityModel
from t2t_keras.decoding.request import LANGUAGES, QUALITY, Generation, GenerationRequest, check_lines, wants_quality
from t2t_keras.errors import T2TError
from t2t_keras.export.constrained_module import TERM_SEPARATOR
from t2t_keras.export.integrity import verify_export
from t2t_keras.export.sample_signature import SAMPLE
from t2t_keras.runs import INSPECTION_DIR, load_export
from t2t_keras.special_ids import UNK_ID

TRANSLATION = frozenset({"beam_size", "alpha", "max_extra_length", "num_return"})
CONTINUATION = frozenset({"max_extra_length", "temperature", "top_k", "seed"})
CONSTRAINED = "translate_constrained"


class SavedModelArtifact(Artifact):
    """A translation or lm SavedModel export, loaded once (see the module docstring).

    Args:
        path: the export directory.
        batch_size: most lines per signature call.
        loaded: the SavedModel, if already loaded (`load_saved_model`).
    """

    kind = "saved_model"

    def __init__(self, path, batch_size=32, loaded=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1. Received: batch_size={batch_size}")
        self.path, self.batch_size = pathlib.Path(path), batch_size
        self.saved_model = loaded or load_saved_model(self.path)
        signatures = self.saved_model.signatures
        self.task = "lm" if "continue" in signatures else "translation"
        if self.task == "translation" and ("translate" not in signatures or not hasattr(self.saved_model,
                                                                                          "default_beam_size")):
            raise T2TError(f"{path} has no 'translate' signature: it is not a text export of export_run (an ids-only "
                           "export takes token ids: call its 'translate_ids' signature).")
        self.defaults, self.accepts = (self._translation_defaults() if self.task == "translation" else
                                       self._continuation_defaults())
        self.operations = frozenset(("generate", "score") if "score" in signatures else ("generate",))
        self.signature_names = (("serving_default", "translate") if self.task == "translation" else
                                ("serving_default", "continue"))
        self._tokenizer = self._aligner_model = None

    def _translation_defaults(self):
        module = self.saved_model
        self.max_beam_size = int(module.max_beam_size.numpy())
        self.max_length = int(module.max_source_length.numpy()) + 1
        self.jit_compiled = bool(module.jit_compiled.numpy())
        stopping = module.stopping.numpy().decode("utf-8") if hasattr(module, "stopping") else "beam"
        penalty = module.length_penalty.numpy().decode("utf-8") if hasattr(module, "length_penalty") else "gnmt"
        longest = int(module.max_output_length.numpy()) if hasattr(module, "max_output_length") else 0
        defaults = GenerationRequest(int(module.default_beam_size.numpy()), float(module.default_alpha.numpy()),
                                     penalty, int(module.default_max_extra_length.numpy()), stopping,
                                     max_output_length=longest or None,
                                     end_at_limit=bool(getattr(module, "end_at_limit", False) and
                                                       module.end_at_limit.numpy()))
        self.language_codes = [code.decode("utf-8") for code in module.language_codes.numpy()] \
            if hasattr(module, "language_codes") else None
        accepts = TRANSLATION | (ALIGNMENT if (self.path / INSPECTION_DIR / "model.keras").exists() else set())
        if SAMPLE in self.saved_model.signatures:  # an export written before sampling existed has no `sample`
            accepts = accepts | SAMPLING
        if "quality" in self.saved_model.signatures["translate"].structured_outputs:  # a run's qe-train estimate
            accepts = accepts | set(QUALITY)
            record = json.loads(module.quality_estimate.numpy().decode("utf-8"))
            self.quality_models = [QualityModel.from_dict(model) for model in record["models"]]
            self.quality_features = WITHOUT_DISTRIBUTIONS  # what `score` gives, where `translate` does not estimate
        if self.language_codes is not None:  # a language code among the pieces: no alignments
            accepts = accepts - ALIGNMENT | set(LANGUAGES)
        return defaults, accepts | ({"constraints"} if CONSTRAINED in self.saved_model.signatures else set())

    def check_request(self, request):
        """`Artifact.check_request`, and a multilingual export's languages among its codes."""
        sampled = sorted(set(request.given(self.defaults)) & SAMPLING)
        if sampled and self.task == "translation" and SAMPLE not in self.saved_model.signatures:
            raise T2TError(f"{self.describe()} has no '{SAMPLE}' signature (exported before sampling existed), so it "
                           f"does not take {', '.join(sampled)}: export the run again to sample with it.")
        request = super().check_request(request)
        for field in LANGUAGES:
            code = getattr(request, field)
            if code is not None and code not in self.language_codes and f"__{code}__" not in self.language_codes:
                raise T2TError(unknown_language(field, code, self.language_codes,
                                                f"the export's variable language_codes ({self.path})"))
        return request

    def _continuation_defaults(self):
        module = self.saved_model
        self.max_length, self.max_beam_size = int(module.max_length.numpy()), 1
        # Exports written before the setting had one name call it max_new_tokens.
        self._length_name = "max_new_tokens" if hasattr(module, "default_max_new_tokens") else "max_extra_length"
        defaults = GenerationRequest(beam_size=1, max_extra_length=int(getattr(
            module, f"default_{self._length_name}").numpy()), temperature=float(module.default_temperature.numpy()),
            top_k=int(module.default_top_k.numpy()))
        return defaults, CONTINUATION

    def generate(self, lines, request):
        """The `Generation` of `lines` under `request` (`self.request(...)`)."""
        lines, request = check_lines(lines), self.check_request(request)
        if self.task == "lm":
            return in_chunks(lines, self.batch_size, 1, lambda chunk: self._continue(chunk, request))
        if request.constraints is not None:
            generation = self._constrained(lines, request)
        else:
            generation = in_chunks(lines, self.batch_size, request.num_return,
                                   lambda chunk: self._translate(chunk, request))
        generation = self.with_quality(lines, generation, request)  # translate's, else from the score signature
        return self._aligned(lines, generation, request) if request.alignments else generation

    def signature_defs(self):
        return signature_defs(self.saved_model)

    @property
    def tokenizer(self):
        """The tokenizer saved beside the export (for piece counts)."""
        if self._tokenizer is None:
            from t2t_keras.data.tokenizers import find_tokenizer, load_tokenizer

            self._tokenizer = load_tokenizer(find_tokenizer(self.path / INSPECTION_DIR))  # DataError if missing
        return self._tokenizer

    def piece_lengths(self, sentences):
        """Piece counts of `sentences`, from the tokenizer saved beside the export."""
        if not sentences:
            return []
        return self.tokenizer.tokenize(tf.constant(sentences)).row_lengths().numpy().tolist()

    def _score_batch(self, sources, targets):
        """Forced decoding with the `score` signature: sums `(n,)` and per-token NLL arrays of `n` pairs."""
        out = self.saved_model.signatures["score"](inputs=tf.constant(sources, tf.string),
                                                   targets=tf.constant(targets, tf.string))
        nll, lengths = out["token_nll"].numpy(), out["target_length"].numpy()
        return out["nll"].numpy(), [row[:n] for row, n in zip(nll, lengths)]

    def _quality_batch(self, sources, targets):
        """The features `score` gives (`quality_features.WITHOUT_DISTRIBUTIONS`) of `n` translations (MBR's chosen
        candidates, constrained translations), piece counts and unknown pieces from the tokenizer beside the export."""
        out = self.saved_model.signatures["score"](inputs=tf.constant(sources, tf.string),
                                                   targets=tf.constant(targets, tf.string))
        nll, lengths = out["token_nll"].numpy(), out["target_length"].numpy()
        sides = [self.tokenizer.tokenize(tf.constant(side)).to_list() for side in (sources, targets)]
        return [features_from_token_log_probs(-row[:n], len(source), len(target), source.count(UNK_ID),
                                              target.count(UNK_ID))
                for row, n, source, target in zip(nll, lengths, *sides)]

    def _rows(self, items):
        """`items` padded to a power-of-two count for an XLA-compiled export (few shapes), else as they are."""
        return pad_rows_to_power_of_two(items) if self.jit_compiled else items

    def _translate(self, lines, request):
        """One call of the `translate` signature on `lines` (of `sample`, sampling)."""
        if request.sampling:
            return self._sample(lines, request)
        languages = {} if self.language_codes is None else {
            field: tf.constant(getattr(request, field) or "", tf.string) for field in LANGUAGES}
        out = self.saved_model.signatures["translate"](
            inputs=tf.constant(self._rows(lines), tf.string), beam_size=tf.constant(request.beam_size, tf.int32),
            alpha=tf.constant(request.alpha, tf.float32),
            max_extra_length=tf.constant(request.max_extra_length, tf.int32),
            num_return=tf.constant(request.num_return, tf.int32), **languages)
        count = len(lines)
        texts = [[t.decode("utf-8", errors="replace") for t in row] for row in out["translations"].numpy()[:count]]
        quality = out["quality"].numpy()[:count].tolist() if wants_quality(request) else None
        return Generation(texts, out["scores"].numpy()[:count].tolist(), out["truncated"].numpy()[:count].tolist(),
                          None, [None] * count, quality)

    def _sample(self, lines, request):
        """One call of the `sample` signature on `lines`: `num_return` samples of each, most likely first."""
        languages = {} if self.language_codes is None else {
            field: tf.constant(getattr(request, field) or "", tf.string) for field in LANGUAGES}
        number = {name: tf.constant(getattr(request, name), dtype) for name, dtype in (
            ("num_return", tf.int32), ("max_extra_length", tf.int32), ("temperature", tf.float32),
            ("top_k", tf.int32), ("top_p", tf.float32), ("epsilon", tf.float32))}
        seed = tf.constant(-1 if request.seed is None else request.seed, tf.int32)  # -1: a fresh seed per call
        out = self.saved_model.signatures[SAMPLE](inputs=tf.constant(lines, tf.string), seed=seed, **number,
                                                  **languages)
        texts = [[t.decode("utf-8", errors="replace") for t in row] for row in out["translations"].numpy()]
        return Generation(texts, out["scores"].numpy().tolist(), out["truncated"].numpy().tolist(), None,
                          [None] * len(lines))

    def _constrained(self, lines, request):
        """The `translate_constrained` signature on `lines` and their terms, in chunks; the best translation only."""
        if request.num_return != 1:
            raise T2TError("num_return must be 1 with constraints: the search returns the best translation only.")
        if len(request.constraints) != len(lines):
            raise T2TError(f"constraints must be a list with one list of target terms per sentence ({len(lines)}), "
                           "e.g. [[\"rotes Haus\"], []].")
        rows = list(zip(lines, request.constraints))
        return in_chunks(rows, self.batch_size, 1, lambda chunk: self._constrained_chunk(chunk, request))

    def _constrained_chunk(self, rows, request):
        out = self.saved_model.signatures[CONSTRAINED](
            inputs=tf.constant([line for line, _ in self._rows(rows)], tf.string),
            constraints=tf.constant([TERM_SEPARATOR.join(terms) for _, terms in self._rows(rows)], tf.string),
            beam_size=tf.constant(request.beam_size, tf.int32), alpha=tf.constant(request.alpha, tf.float32),
            max_extra_length=tf.constant(request.max_extra_length, tf.int32))
        count = len(rows)
        satisfied = out["satisfied"].numpy()[:count].tolist()
        return Generation([[t.decode("utf-8", errors="replace")] for t in out["translations"].numpy()[:count]],
                          [[s] for s in out["scores"].numpy()[:count].tolist()],
                          out["truncated"].numpy()[:count].tolist(), None,
                          [None if ok else UNSATISFIED_IN_EXPORT for ok in satisfied])

    def _continue(self, prompts, request):
        """One call of the `continue` signature on `prompts`."""
        length = {self._length_name: tf.constant(request.max_extra_length, tf.int32)}
        out = self.saved_model.signatures["continue"](
            inputs=tf.constant(prompts, tf.string), temperature=tf.constant(request.temperature, tf.float32),
            top_k=tf.constant(request.top_k, tf.int32),
            seed=tf.constant(-1 if request.seed is None else request.seed, tf.int32), **length)
        return Generation([[text.decode("utf-8")] for text in out["continuations"].numpy()],
                          [[float(score)] for score in out["scores"].numpy()], [False] * len(prompts), None,
                          [None] * len(prompts))

    def _aligned(self, lines, generation, request):
        """`generation` with the word alignments of its best texts, from the export's Keras model."""
        if self._aligner_model is None:
            self._aligner_model = load_export(self.path)
        aligner = Aligner(*self._aligner_model, request.alignment_layer, request.alignment_heads,
                          request.alignment_rows)
        return generation._replace(alignments=[pair.links for pair in aligner.align(lines, generation.best)])


def load_saved_model(path):
    """The SavedModel at `path`, loaded once, with the TF-Text ops its tokenizer needs registered."""
    path = pathlib.Path(path)
    if not (path / "saved_model.pb").exists():
        raise T2TError(f"{path} is not a SavedModel directory (no saved_model.pb): export a run with "
                       "t2t-keras export.")
    try:
        import tensorflow_text  # noqa: F401  (registers the tokenizer's TF-Text ops the export uses)
    except ImportError:
        raise T2TError("Translating text with an export needs tensorflow-text: pip install tensorflow-text.") from None
    verify_export(path)  # a damaged file is named before TensorFlow reads it
    return tf.saved_model.load(str(path))
