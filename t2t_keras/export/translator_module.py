"""The `tf.Module` an export saves: tokenizer (any `data.tokenizer`) and beam search (§6.1) inside the graph.

Signatures (all batch-major, any batch size, including 0):

* `serving_default(inputs)`: `inputs` tf.string `(N,)` UTF-8 sentences. Decodes
  with the defaults fixed at export time and returns `translations` tf.string
  `(N,)`, `scores` float32 `(N,)` and `truncated` bool `(N,)`.
* `translate(inputs, beam_size, alpha, max_extra_length, num_return)`: the same
  with every decoding parameter an explicit scalar input; returns the n-best
  lists `translations` `(N, num_return)`, `scores` `(N, num_return)` (best
  first) and `truncated` `(N,)`; an export of a run with a quality estimate
  (`t2t-keras qe-train`) also returns `quality` float32 `(N,)`, the best
  translation's estimate in [0, 1] (`decoding.quality_model`), from one
  teacher-forced pass over it (`decoding.quality_features`), and so does
  `serving_default`.
* `sample(inputs, num_return, max_extra_length, temperature, top_k, top_p,
  epsilon, seed)`: `num_return` samples of each sentence (`translations` and
  `scores` `(N, num_return)`, most likely first, and `truncated`), repeatable
  for a seed >= 0 (`export.sample_signature`).
* `score(inputs, targets)`: forced decoding (see `decoding.forced`): the
  negative log-likelihood of each `targets` sentence as the translation of
  `inputs`, returned as `nll` float32 `(N,)` (the sum), `token_nll` float32
  `(N, T)` (per token, EOS included, then 0s), `target_length` int32 `(N,)`
  and `truncated` bool `(N,)` (either side cut to `max_length - 1` pieces).
* `translate_ids(source_ids, beam_size, alpha, max_extra_length, num_return)`:
  int32 `(N, L)` token ids in, `tokens` int32 `(N, num_return, T)`
  (each ending with EOS=3 unless cut at its limit, then 0s), `scores` and
  `truncated` out. Its graph holds core TensorFlow ops only, so servers built
  without TF-Text can run it.

An ids-only export (no tokenizer) has just `translate_ids` and a
`serving_default(source_ids)` returning the best `tokens` `(N, T)`, `scores`
and `truncated`; it loads without TF-Text (e.g. in stock TF Serving), which a
text export, whose tokenizer runs TF-Text ops, does not.

How defaults work: a SavedModel signature has no optional inputs, so the
defaults live in `serving_default`, which takes strings only and reads the
export's default parameters from variables (`default_beam_size`,
`default_alpha`, `default_max_extra_length`; n-best size 1). `translate` and
`translate_ids` take every parameter explicitly: one export serves every
setting.

Parameters: `beam_size` in [1, `max_beam_size`] (1 is greedy decoding, whose
score is the plain log-probability; above 1, scores are length-normalised,
see `decoding.length_penalty`); `alpha` >= 0; `max_extra_length` >= 0: a
sentence generates at most input length + this many tokens (§6.1), and never
more than the model's `max_length`; `num_return` in [1, `beam_size`]. Values
out of range fail with InvalidArgumentError naming the parameter. In graph mode
there are two searches, greedy and one beam search that takes the beam size and
the n-best length as tensors, chosen with `tf.switch_case`: a loaded export's
memory grows with the searches it holds (bench/results/history.md, "One beam search for
every beam size"). With XLA everywhere (`jit_compile=True`), which needs the
shapes a beam size fixes, the search is traced for every beam size (twice per
size above 1: for the best hypothesis only, and for the full n-best list, since
early stopping depends on the list's length). `jit_compile="auto"` holds both
kinds: a batch of fewer than `GRAPH_SEARCH_HYPOTHESES` hypotheses (rows, padded
to a power of two, x beam size) searched greedily or with the default beam size
for the best translation runs an XLA search (on those padded rows, repeating
the first, so that few shapes compile), every other batch the graph-mode searches, which drop
their done sentences (`decoding.compaction`). The n-best lists are padded to
`max_beam_size` inside and cut to `num_return` on the way out. Each search is
a function of its own, prepared by the runtime the first time it is chosen.

Source ids: each row holds piece ids (no BOS), right-padded with the model's
padding id (0 for a model of ours); an EOS in a row ends it (what follows is
ignored), so rows with or without a final EOS both work. Ids outside the
vocabulary become UNK (`export.source_ids`). The ids are the model's own: an
imported checkpoint's padding, end and start ids, and the ids its tokenizer puts
around the pieces (NLLB and M2M-100: the source language's code); a
multilingual export's `translate` and `translate_ids` also take `src_lang` and
`tgt_lang` (`export.languages`). The length penalty, the stopping rule,
`max_output_length` and `end_at_limit` of the export's request are fixed in
its searches (variables of the same names; `max_output_length` 0: none).

Over-long input: a sentence longer than the model accepts (`max_length`
tokens, EOS included) keeps its first `max_length - 1` pieces, is translated,
and is flagged `truncated`; it never fails. Empty inputs (no pieces: "" or
blanks) translate to "" (no tokens) with score 0.
"""

import functools
import json

import tensorflow as tf

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding import searches
from t2t_keras.decoding.batch_shapes import in_power_of_two_rows, power_of_two_rows_tensor
from t2t_keras.decoding.common import dim
from t2t_keras.decoding.forced import teacher_forcing_targets, token_nll
from t2t_keras.decoding.layout import Layout, is_multilingual, layout_of, source_pieces, target_pieces
from t2t_keras.decoding.parameters import check_beam_size, check_integer
from t2t_keras.decoding.quality_features import FEATURES, features_from_log_probs
from t2t_keras.decoding.quality_model import choose_model
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.decoding.sharding import choose_shards, sharded
from t2t_keras.decoding.shortlist import ShortlistTable, batch_vocabulary
from t2t_keras.export.languages import LANGUAGE_SPECS, ExportLanguages
from t2t_keras.export.sample_signature import SAMPLE, SAMPLE_SPECS, sample_search, sampling_checks
from t2t_keras.export.search_table import SearchTable
from t2t_keras.export.signature_functions import SignatureFunctions, function, scalar_specs
from t2t_keras.export.source_ids import DEFAULT_IDS, prepare_source
from t2t_keras.switches.decisions import GRAPH_SEARCH_HYPOTHESES

MAX_BEAM_SIZE = DecodingConfig.max_beam_size  # the config's default, written down once

PARAMETER_SPECS = scalar_specs(beam_size=tf.int32, alpha=tf.float32, max_extra_length=tf.int32, num_return=tf.int32)
STRINGS_SPEC = tf.TensorSpec([None], tf.string, name="inputs")
IDS_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")
TARGETS_SPEC = tf.TensorSpec([None], tf.string, name="targets")


class TranslatorModule(tf.Module):
    """Tokenizer + model + search; the exported functions are the attributes `serve`, `translate`, `translate_ids`.

    Args:
        model: a built `Transformer`.
        tokenizer: a tokenizer of `data.tokenizers` (SentencePiece or WordPiece), or None for an ids-only module
            (only `translate_ids`; loads without TF-Text).
        max_beam_size: largest beam size the export accepts; with XLA the
            search is traced for every size from 1 to this, without it one
            beam search serves every size.
        request: the `GenerationRequest` of `serving_default` (beam_size, alpha, max_extra_length), whose
            `length_penalty` and `stopping` (when the beam search is done with a sentence) every search keeps
            (fixed at export, readable as the variables `length_penalty` and `stopping`).
        jit_compile: True compiles each search with XLA. Faster per call once
            compiled, but every new input shape (rows, width rounded to 8,
            max_extra_length) is compiled on first use, and the compiled
            programs stay in memory. Without XLA (False, the default) the searches
            grow their decoder cache step by step (`decoding.common.new_cache`) and
            drop done sentences. "auto": XLA for small batches of the greedy and the
            default beam search, graph mode for the rest (see the module docstring;
            variable `xla_below_hypotheses`, 0 where no search is small-batch XLA).
        shards: each search splits its batch into this many concurrent searches
            (`decoding.sharding`; "auto": one per CPU core of the exporting
            machine, 1 with a GPU or TPU). Fixed in the export. `export_run`
            takes the run's `decoding.shards` ("auto" by default: 1.3x the
            sentences/s of one shard at batch 32 on 2 cores, docs/results.md).
        shortlist: None, or a vocabulary shortlist (`data.shortlist.Shortlist`) held in the
            export (variables `shortlist_entries`, `shortlist_frequent`): every search of
            `translate_ids` (and so of `translate` and `serving_default`) covers only the batch's
            shortlisted target pieces (`decoding.shortlist`). `score` keeps the whole vocabulary.
        layout: the `decoding.layout.Layout` of the model's sources and translations; None: the tokenizer's (an
            ids-only module of an imported checkpoint is given the one of its run's tokenizer).
        quality: None, or the run's `decoding.quality_model.QualityModel`s (`t2t-keras qe-train`): the one over
            every feature gives the `quality` output of `translate` and `serving_default` (text modules); all of them
            are kept as JSON in the variable `quality_estimate` (`{"models": [...]}`), for what the signatures
            compute without it (an `artifacts.saved_model` reads them).
        name: module name.
    """

    def __init__(self, model, tokenizer=None, max_beam_size=MAX_BEAM_SIZE, request=DEFAULTS, jit_compile=False,
                 shards=1, shortlist=None, layout=None, quality=None, name=None):
        super().__init__(name=name)
        check_beam_size(request.beam_size, check_integer("max_beam_size", max_beam_size))  # the rest: the request's
        if jit_compile not in (True, False, "auto"):
            raise ValueError(f"jit_compile must be True, False or 'auto'. Received: jit_compile={jit_compile!r}")
        self.model, self.tokenizer = model, tokenizer
        self._ids = getattr(model, "special_ids", None) or DEFAULT_IDS
        self._layout = layout or (layout_of(tokenizer, self._ids) if tokenizer is not None else
                                  Layout((), (self._ids.eos,), ()))
        self._languages = ExportLanguages(tokenizer, self._layout) if tokenizer is not None and is_multilingual(
            tokenizer) else None
        self._length_penalty, self._stopping = request.length_penalty, request.stopping
        self._max_output_length, self._end_at_limit = request.max_output_length, request.end_at_limit
        self._max_beam_size, self._xla_beam_size = max_beam_size, request.beam_size
        self._jit_compile = jit_compile != "auto" and bool(jit_compile)
        self._xla_below = GRAPH_SEARCH_HYPOTHESES if jit_compile == "auto" else 0
        self._shards = choose_shards(shards)
        self._record(request)
        self._quality = choose_model(quality, FEATURES, "the exported quality estimate") if quality and tokenizer \
            else None
        if self._quality is not None:
            self.quality_estimate = tf.Variable(json.dumps({"models": [model.to_dict() for model in quality]}),
                                                trainable=False, name="quality_estimate")
        self._shortlisted = shortlist is not None
        if self._shortlisted:
            ShortlistTable(shortlist, model.vocab_size)  # checks the table's size against the model's vocabulary
            self.shortlist_entries = tf.Variable(shortlist.entries, trainable=False, dtype=tf.int32,
                                                 name="shortlist_entries")
            self.shortlist_frequent = tf.Variable(shortlist.frequent, trainable=False, dtype=tf.int32,
                                                  name="shortlist_frequent")
        self._tables(jit_compile)
        self.functions = SignatureFunctions()  # the signatures' tf.functions, saved only as signatures
        self._make_functions()

    def _record(self, request):
        """Variables, so that a client of the loaded SavedModel can read how it searches."""
        variable = functools.partial(tf.Variable, trainable=False)
        self.max_beam_size = variable(self._max_beam_size, name="max_beam_size")
        self.stopping = variable(request.stopping, name="stopping")
        self.length_penalty = variable(request.length_penalty, name="length_penalty")
        self.jit_compiled = variable(self._jit_compile, name="jit_compiled")
        self.xla_below_hypotheses = variable(self._xla_below, name="xla_below_hypotheses")
        self.decoding_shards = variable(self._shards, name="decoding_shards")
        self.max_source_length = variable(self.model.max_length - 1, name="max_source_length")
        self.default_beam_size = variable(request.beam_size, name="default_beam_size")
        self.default_alpha = variable(request.alpha, name="default_alpha")
        self.default_max_extra_length = variable(request.max_extra_length, name="default_max_extra_length")
        self.max_output_length = variable(request.max_output_length or 0, name="max_output_length")
        self.end_at_limit = variable(request.end_at_limit, name="end_at_limit")
        if self._languages is not None:
            self.language_codes = variable(self._languages.codes, name="language_codes")
            self.source_lang = variable(self._languages.source, name="source_lang")
            self.target_lang = variable(self._languages.target, name="target_lang")

    def signatures(self):
        """The signature functions for `tf.saved_model.save`, by name."""
        functions = self.functions
        signatures = {"serving_default": functions.serve.get_concrete_function(),
                      "translate_ids": functions.translate_ids.get_concrete_function()}
        if self.tokenizer is not None:
            signatures["translate"] = functions.translate.get_concrete_function()
            signatures["score"] = functions.score.get_concrete_function()
            signatures[SAMPLE] = functions.sample.get_concrete_function()
        return signatures

    def _make_functions(self):
        """The exported functions; `translate` and text `serve` only with a tokenizer.

        They are made per instance in `self.functions` (not decorated methods
        or attributes) because saving traces every function of the module it
        finds once more (`export.signature_functions`).
        """
        functions = self.functions
        languages = LANGUAGE_SPECS if self._languages is not None else ()
        functions.translate_ids = function(self._translate_ids, (IDS_SPEC,) + PARAMETER_SPECS + languages)
        if self.tokenizer is None:
            functions.serve = function(self._serve_ids, (IDS_SPEC,))
            return
        functions.translate = function(self._translate, (STRINGS_SPEC,) + PARAMETER_SPECS + languages)
        functions.serve = function(self._serve_text, (STRINGS_SPEC,))
        functions.score = function(self._score, (STRINGS_SPEC, TARGETS_SPEC))
        functions.sample = function(self._sample, (STRINGS_SPEC,) + SAMPLE_SPECS + languages)

    def _translate_ids(self, source_ids, beam_size, alpha, max_extra_length, num_return, *languages):
        """n-best output ids of source piece ids (with `src_lang` and `tgt_lang` last for a multilingual export);
        see the module docstring."""
        layout = self._layout
        prefix, suffix, target = (layout.source_prefix, layout.source_suffix, layout.target_prefix) if not languages \
            else self._languages.ids(*languages)
        source, truncated, empty = prepare_source(source_ids, self.model.max_length, self.model.vocab_size, self._ids,
                                                  prefix, suffix)
        with tf.control_dependencies(self._check_parameters(beam_size, alpha, max_extra_length, num_return)):
            max_extra_length = tf.minimum(max_extra_length, self.model.max_length)  # no int32 overflow
        tokens, scores = self._search(source, beam_size, alpha, max_extra_length, num_return, target)
        tokens = tf.where(empty[:, None, None], self._ids.pad, tokens)  # (batch, num_return, bound)
        scores = tf.where(empty[:, None], 0.0, scores)  # (batch, num_return)
        return {"tokens": tokens, "scores": scores, "truncated": truncated}

    def _translate(self, inputs, beam_size, alpha, max_extra_length, num_return, *languages):
        """n-best translations of UTF-8 sentences; see the module docstring."""
        source_ids = source_pieces(self.tokenizer, inputs).to_tensor(default_value=self._ids.pad)
        out = self.functions.translate_ids(source_ids, beam_size, alpha, max_extra_length, num_return, *languages)
        tokens = out["tokens"]
        shape = tf.shape(tokens)
        texts = self.tokenizer.detokenize(tf.reshape(tokens, (-1, shape[2])))
        result = {
            "translations": tf.reshape(texts, shape[:2]),
            "scores": out["scores"],
            "truncated": out["truncated"],
        }
        if self._quality is not None:
            result["quality"] = self._estimate(inputs, result["translations"][:, 0], languages)
        return result

    def _estimate(self, inputs, translations, languages):
        """The quality estimate of each translation of `inputs`, from a teacher-forced pass over its text tokenized
        again, as `score` reads it."""
        layout = self._layout
        prefix, suffix, target = (layout.source_prefix, layout.source_suffix, layout.target_prefix) if not languages \
            else self._languages.ids(*languages)
        source_ids = source_pieces(self.tokenizer, inputs).to_tensor(default_value=self._ids.pad)
        source, _, _ = prepare_source(source_ids, self.model.max_length, self.model.vocab_size, self._ids, prefix,
                                      suffix)
        pieces = target_pieces(self.tokenizer, translations)
        kept = pieces[:, :self.model.max_length - 1 - len(layout.target_prefix)]
        target_in, target_out = teacher_forcing_targets(kept, self._ids, target)
        log_probs = tf.nn.log_softmax(tf.cast(self.model((source, target_in), training=False), tf.float32))
        features = features_from_log_probs(log_probs, source, target_out, self._ids,
                                           len(layout.source_prefix) + len(layout.source_suffix),
                                           1 + len(layout.target_prefix))
        return self._quality.in_graph({name: features[:, i] for i, name in enumerate(FEATURES)})

    def _sample(self, inputs, num_return, max_extra_length, temperature, top_k, top_p, epsilon, seed, *languages):
        """`num_return` samples of each sentence, most likely first (`export.sample_signature`)."""
        layout = self._layout
        prefix, suffix, target = (layout.source_prefix, layout.source_suffix, layout.target_prefix) if not languages \
            else self._languages.ids(*languages)
        source_ids = source_pieces(self.tokenizer, inputs).to_tensor(default_value=self._ids.pad)
        source, truncated, empty = prepare_source(source_ids, self.model.max_length, self.model.vocab_size, self._ids,
                                                  prefix, suffix)
        with tf.control_dependencies(sampling_checks(num_return, max_extra_length, temperature, top_k, top_p, epsilon)):
            max_extra_length = tf.minimum(max_extra_length, self.model.max_length)  # no int32 overflow
        bound = tf.shape(source)[1] + max_extra_length
        if self._max_output_length is not None:
            bound = tf.minimum(bound, self._max_output_length)
        options = dict(max_output_length=self._max_output_length, end_at_limit=self._end_at_limit,
                       forced_prefix=tf.cast(tf.reshape(target, [-1]), tf.int32) if self._prefixed else None,
                       output_ids=batch_vocabulary(self.shortlist_entries, self.shortlist_frequent, source,
                                                   self.model.vocab_size, special_ids=self._ids)
                       if self._shortlisted else None)
        sampler = dict(temperature=temperature, top_k=top_k, top_p=top_p, epsilon=epsilon, seed=seed)
        tokens, scores = sample_search(self.model, source, num_return, max_extra_length, sampler, bound, **options)
        tokens = tf.where(empty[:, None, None], self._ids.pad, tokens)  # (batch, num_return, bound)
        shape = tf.shape(tokens)
        texts = self.tokenizer.detokenize(tf.reshape(tokens, (-1, shape[2])))
        return {"translations": tf.reshape(texts, shape[:2]), "scores": tf.where(empty[:, None], 0.0, scores),
                "truncated": truncated}

    def _score(self, inputs, targets):
        """Forced-decoding negative log-likelihood of `targets`; see the module docstring."""
        layout = self._layout
        source_ids = source_pieces(self.tokenizer, inputs).to_tensor(default_value=self._ids.pad)
        source, source_truncated, _ = prepare_source(source_ids, self.model.max_length, self.model.vocab_size,
                                                     self._ids, layout.source_prefix, layout.source_suffix)
        pieces = target_pieces(self.tokenizer, targets)
        kept = pieces[:, :self.model.max_length - 1 - len(layout.target_prefix)]
        target_in, target_out = teacher_forcing_targets(kept, self._ids, layout.target_prefix)
        nll = token_nll(self.model, source, target_in, target_out)  # (batch, target_len)
        return {"nll": tf.reduce_sum(nll, axis=1), "token_nll": nll,
                "target_length": tf.cast(kept.row_lengths() + 1 + len(layout.target_prefix), tf.int32),
                "truncated": source_truncated | (pieces.row_lengths() > kept.row_lengths())}

    def _serve_text(self, inputs):
        """Best translation of each sentence with the export's default parameters (and languages)."""
        languages = (tf.constant(""), tf.constant("")) if self._languages is not None else ()
        out = self.functions.translate(inputs, *self._defaults(), *languages)
        best = {"translations": out["translations"][:, 0], "scores": out["scores"][:, 0],
                "truncated": out["truncated"]}
        return dict(best, quality=out["quality"]) if "quality" in out else best

    def _serve_ids(self, source_ids):
        """Best output ids of each row with the default parameters (ids-only modules)."""
        out = self.functions.translate_ids(source_ids, *self._defaults())
        return {"tokens": out["tokens"][:, 0], "scores": out["scores"][:, 0], "truncated": out["truncated"]}

    def _defaults(self):
        """beam_size, alpha, max_extra_length and num_return of `serving_default`."""
        return (self.default_beam_size.read_value(), self.default_alpha.read_value(),
                self.default_max_extra_length.read_value(), tf.constant(1))

    def _check_parameters(self, beam_size, alpha, max_extra_length, num_return):
        """Assertions that fail with a message naming the parameter and its allowed range."""
        largest = self._max_beam_size
        return [
            tf.debugging.Assert((beam_size >= 1) & (beam_size <= largest),
                                [f"beam_size must be in [1, {largest}]. Received: beam_size=", beam_size]),
            tf.debugging.Assert(alpha >= 0.0, ["alpha must be >= 0. Received: alpha=", alpha]),
            tf.debugging.Assert(max_extra_length >= 0,
                                ["max_extra_length must be >= 0. Received: max_extra_length=", max_extra_length]),
            tf.debugging.Assert((num_return >= 1) & (num_return <= beam_size),
                                ["num_return must be in [1, beam_size]. Received: num_return=", num_return,
                                 "beam_size=", beam_size]),
        ]

    def _search(self, source, beam_size, alpha, max_extra_length, num_return, target_prefix=()):
        """Tokens `(batch, num_return, bound)` and scores `(batch, num_return)`, best first; every output starts
        with `target_prefix` (a multilingual model's target language)."""
        bound = tf.shape(source)[1] + max_extra_length
        if self._max_output_length is not None:
            bound = tf.minimum(bound, self._max_output_length)
        arguments = (source, alpha, max_extra_length, bound)
        if self._shortlisted:  # the batch's searched vocabulary, computed once for every branch
            arguments += (batch_vocabulary(self.shortlist_entries, self.shortlist_frequent, source,
                                           self.model.vocab_size, special_ids=self._ids),)
        if self._prefixed:
            arguments += (tf.cast(tf.reshape(target_prefix, [-1]), tf.int32),)
        shard = functools.partial(sharded, shards=self._shards)
        if not self._xla_below:
            tokens, scores = self._table.select(arguments, beam_size, num_return, shard)
        else:  # then the small batches' XLA searches, greedy (2) and the default beam size (3)
            branches = self._table.branches(arguments, beam_size, num_return, shard) + [
                functools.partial(in_power_of_two_rows(shard(self._small_table.search(key))), *arguments)
                for key in self._small_table.keys]
            index = self._table.index(beam_size, num_return)
            index = tf.where(self._small_batch(tf.shape(source)[0], beam_size, num_return), index + 2, index)
            tokens, scores = tf.switch_case(index, branches)
        return tokens[:, :num_return], scores[:, :num_return]

    def traced_searches(self):
        """`(beam_size, num_return, jit)` of every search traced so far (None: any size), sorted."""
        return sorted([key + (self._table.per_size,) for key in self._table.made]
                      + [key + (True,) for key in self._small_table.made], key=str)

    def _small_batch(self, rows, beam_size, num_return):
        """Whether a batch runs a small-batch XLA search: fewer than `xla_below_hypotheses` hypotheses (its rows
        padded to a power of two, as the XLA search gets them, x beam size), greedy or the default beam size for
        the best translation only."""
        searched = tf.equal(beam_size, 1) | (tf.equal(beam_size, self._xla_beam_size) & tf.equal(num_return, 1))
        hypotheses = power_of_two_rows_tensor(tf.maximum(rows, 1)) * beam_size
        return (rows >= 1) & (hypotheses < self._xla_below) & searched

    def _tables(self, jit_compile):
        """The module's `SearchTable`s: XLA per beam size, or graph mode's two searches; with "auto" also the
        small batches' XLA searches (greedy, and the default beam size for the best translation)."""
        per_size = jit_compile is True
        self._table = SearchTable(functools.partial(self._new_search_function, jit=per_size), self._max_beam_size,
                                  per_size, nbest=True)
        small = [(1, 1), (self._xla_beam_size, 1)]
        self._small_table = SearchTable(functools.partial(self._new_search_function, jit=True), self._max_beam_size,
                                        True, nbest=True)
        self._small_table.keys = small

    def _new_search_function(self, beam_size, num_return, jit):
        """The search for one beam size (None: any, given as arguments), XLA-compiled or not (`jit`), as a function
        of its own.

        `_noinline` keeps it a separate function in the SavedModel rather
        than inlining every search into the signature's graph, so the runtime
        prepares a search the first time it is chosen: a signature's first
        call takes seconds instead of tens of seconds. Every trace of the
        signatures calls the same function, so the SavedModel holds each search
        once: a loaded export's memory grows with the number of graph nodes it
        holds (docs/results.md, "Exports").
        """
        sized = beam_size is not None  # else the function takes beam_size and num_return last

        def search(source, alpha, max_extra_length, bound, *rest):
            output_ids = rest[0] if self._shortlisted else None
            prefix = rest[int(self._shortlisted)] if self._prefixed else None
            sizes = (beam_size, num_return) if sized else rest[-2:]
            result = searches.search(self.model, source, beam_size=sizes[0], num_return=sizes[1], alpha=alpha,
                                     length_penalty=self._length_penalty, max_extra_length=max_extra_length,
                                     max_length=bound, stopping=self._stopping, output_ids=output_ids,
                                     growing_cache=not jit, forced_prefix=prefix,
                                     max_output_length=self._max_output_length, end_at_limit=self._end_at_limit)
            return self._pad_nbest(result.tokens, result.scores)

        scalar = tf.TensorSpec([], tf.int32)
        signature = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.float32), scalar, scalar)
        signature += (tf.TensorSpec([None], tf.int32),) if self._shortlisted else ()
        signature += (tf.TensorSpec([None], tf.int32),) if self._prefixed else ()
        signature += () if sized else (scalar, scalar)
        return function(search, signature, jit_compile=jit, experimental_attributes={"_noinline": True})

    @property
    def _prefixed(self):
        """Whether every output starts with forced ids (a multilingual model's target language)."""
        return bool(self._layout.target_prefix)

    def _pad_nbest(self, tokens, scores):
        """n-best lists padded to `max_beam_size` entries, so every branch has one output shape."""
        missing = self._max_beam_size - dim(tokens, 1)
        tokens = tf.pad(tokens, [[0, 0], [0, missing], [0, 0]], constant_values=self._ids.pad)
        scores = tf.pad(scores, [[0, 0], [0, missing]], constant_values=float("-inf"))
        width = self._max_beam_size
        return tf.ensure_shape(tokens, [None, width, None]), tf.ensure_shape(scores, [None, width])
