"""A run directory as an artifact: its task's generator over its weights, and forced decoding.

    artifact = RunArtifact("runs/base", model="best", precision="bfloat16")
    artifact.generate(lines, artifact.request(beam_size=2))

The model, tokenizer and generator load when first needed, so opening a run to read its task costs nothing.
How the run's own model decodes is chosen when it opens: which weights (`model`, `runs.run_weights`), more runs
of its vocabulary decoding with it as an ensemble (`ensemble`, `decoding.ensemble`), the weights' `precision`,
the concurrent `shards` and the vocabulary `shortlist` (translation runs; None: the run's `decoding` config).
"""

import tensorflow as tf

from t2t_keras.artifacts.base import Artifact, check_options
from t2t_keras.decoding.batch_shapes import pad_batch
from t2t_keras.decoding.ensemble import Ensemble
from t2t_keras.decoding.forced import teacher_forcing_rows, token_nll
from t2t_keras.decoding.layout import is_multilingual, language_id, layout_of, source_pieces, target_pieces
from t2t_keras.decoding.parameters import INT32_MAX
from t2t_keras.decoding.quality_features import FEATURES, feature_rows, forced_features
from t2t_keras.decoding.quality_model import QUALITY_ESTIMATE_FILE, read_quality_models
from t2t_keras.decoding.request import LANGUAGES as LANGUAGE_FIELDS
from t2t_keras.decoding.request import QUALITY
from t2t_keras.runs import ensemble_runs, load_run, load_run_model, open_run
from t2t_keras.tasks import task_of

TRANSLATION_OPTIONS = ("precision", "shards", "shortlist")  # how a translation run's own model decodes


class RunArtifact(Artifact):
    """A run directory, opened once (see the module docstring); `generator_options` go to its generator
    (`decoding.generator.Generator`, e.g. `progress`)."""

    kind = "run"

    def __init__(self, run, model="auto", ensemble=(), precision=None, shards=None, shortlist=None,
                 **generator_options):
        self.run = open_run(run)
        self.path, self.model_source = self.run.path, model
        self.config = self.run.load_config()
        self.task = self.config.task
        self.ensemble = tuple(ensemble_runs(self.run, ensemble))  # refuses runs that are not translation runs
        taken = TRANSLATION_OPTIONS if self.task == "translation" else ()
        check_options(f"{self.describe()}: its own model decodes as its config says", taken,
                      precision=precision, shards=shards, shortlist=shortlist or None)
        check_options("an ensemble: its members search their whole vocabulary; translate with one --run-dir",
                      () if self.ensemble else ("shortlist",), shortlist=shortlist or None)
        decoding = self.config.decoding
        self._options = dict(precision=decoding.precision if precision is None else precision,
                             shards=decoding.shards if shards is None else shards, **generator_options)
        self._shortlist = self.run.load_shortlist() if shortlist else None  # a bad file fails before any work
        self._task = task_of(self.config)
        generates = self._task.output is not None
        self.operations = frozenset(("generate", "score") if self.task == "translation" and not self.ensemble else
                                    ("generate",) if generates else ())
        self.defaults = self._task.default_request(decoding)
        self.max_length, self.max_beam_size = self.config.model.max_length, INT32_MAX
        self._generator = self._loaded = self._nll = self._languages = self._features = None
        estimate = self.run.path / QUALITY_ESTIMATE_FILE  # t2t-keras qe-train; an ensemble has none of its own
        if "score" in self.operations and estimate.exists():
            self.quality_models, self.quality_features = read_quality_models(estimate)[0], FEATURES

    @property
    def accepts(self):
        """Its task's request fields (a multilingual checkpoint's languages too, without alignments); an ensemble
        has no single attention to align with."""
        from t2t_keras.decoding.generator import ACCEPTS, ALIGNMENT, PROMPT, SOURCE

        if "generate" not in self.operations:
            return frozenset()
        fields = ACCEPTS[SOURCE if self.task == "translation" else PROMPT]
        if self._multilingual():
            fields = fields - ALIGNMENT | set(LANGUAGE_FIELDS)
        fields = fields | (set(QUALITY) if self.quality_models else set())
        return fields - ALIGNMENT if self.ensemble else fields

    def _multilingual(self):
        """Whether the run is an imported multilingual checkpoint's (NLLB, M2M-100), its tokenizer read once."""
        if self._languages is None:
            pretrained = self.task == "translation" and self.config.data.tokenizer == "pretrained"
            self._languages = is_multilingual(self.run.load_tokenizer()) if pretrained else False
        return self._languages

    def check_request(self, request):
        """`Artifact.check_request`, and the request's languages among the checkpoint's codes."""
        request = super().check_request(request)
        where = f"its tokenizer ({self.run.tokenizer_file(self.config.data.tokenizer)}, manifest.json \"languages\")"
        for field in LANGUAGE_FIELDS:
            if getattr(request, field) is not None:
                language_id(self.tokenizer, field, getattr(request, field), where)
        return request

    @property
    def generator(self):
        """The task's `Generator` over the run's weights (and the ensemble's), built on first use."""
        if self._generator is None:
            self.require("generate")
            model, tokenizer = self.loaded()
            if self.ensemble:
                model = Ensemble([model] + [load_run_model(other, self.model_source) for other in self.ensemble])
            options = dict(self._options, **({} if self._shortlist is None else {"shortlist": self._shortlist}))
            if self.task != "translation":
                options = {k: v for k, v in options.items() if k not in ("precision", "shards")}
            self._generator = self._task.build_generator(model, tokenizer, **options)
        return self._generator

    def loaded(self):
        """`(model, tokenizer)` of the run's weights (`model`), loaded once."""
        if self._loaded is None:
            self._loaded = load_run(self.run, self.model_source)
        return self._loaded

    @property
    def tokenizer(self):
        return self.loaded()[1]

    def generate(self, lines, request):
        """The `Generation` of `lines` under `request` (`self.request(...)`)."""
        request = self.check_request(request)
        return self.with_quality(lines, self.generator.generate(lines, request), request)

    def piece_lengths(self, sentences):
        """Piece counts of `sentences` (no end id), under the run's tokenizer."""
        if not sentences:
            return []
        return source_pieces(self.tokenizer, tf.constant(sentences)).row_lengths().numpy().tolist()

    def _score_batch(self, sources, targets):
        """Sums `(n,)` and per-token NLL arrays of `n` pairs, from the run's float32 model (`decoding.forced`), with
        its own ids (a multilingual model's: the run's languages)."""
        model, tokenizer = self.loaded()
        if self._nll is None:
            spec = tf.TensorSpec([None, None], tf.int32)
            self._nll = tf.function(lambda s, ti, to: token_nll(model, s, ti, to), input_signature=[spec] * 3,
                                    autograph=False)
        rows, ragged, layout = self._forced_rows(sources, targets)
        nll = self._nll(*rows).numpy()
        lengths = [len(p) + 1 + len(layout.target_prefix) for p in ragged[1]]
        return nll.sum(axis=1), [row[:n] for row, n in zip(nll, lengths)]

    def _forced_rows(self, sources, targets):
        """`(source, target_in, target_out)` int32 tensors of `n` pairs for a teacher-forced pass, the pairs'
        pieces and the model's layout."""
        model, tokenizer = self.loaded()
        ragged = [pieces(tokenizer, tf.constant(side)).to_list()
                  for pieces, side in ((source_pieces, sources), (target_pieces, targets))]
        layout = layout_of(tokenizer, model.special_ids)
        # Exact widths: a width rounded up could pass a learned position table's max_length.
        rows = (pad_batch(rows, 1, pad=model.special_ids.pad)
                for rows in teacher_forcing_rows(*ragged, model.special_ids, layout))
        return [tf.constant(row) for row in rows], ragged, layout

    def _quality_batch(self, sources, targets):
        """The quality-estimate features (`decoding.quality_features`) of `n` translations, as dicts; each side
        cut to the model's length."""
        model = self.loaded()[0]
        longest = self.max_length - 1
        (source, target_in, target_out), _, layout = self._forced_rows(sources, targets)
        source, target_in, target_out = source[:, :self.max_length], target_in[:, :longest], target_out[:, :longest]
        if self._features is None:
            extra = (len(layout.source_prefix) + len(layout.source_suffix), 1 + len(layout.target_prefix))
            spec = tf.TensorSpec([None, None], tf.int32)
            self._features = tf.function(lambda s, ti, to: forced_features(model, s, ti, to, *extra),
                                         input_signature=[spec] * 3, autograph=False)
        return feature_rows(self._features(source, target_in, target_out).numpy())
