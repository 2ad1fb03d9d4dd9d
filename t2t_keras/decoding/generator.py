"""A run's generator: strings in, a `Generation` out, for any `GenerationRequest`.

    generator = task_of(config).build_generator(model, tokenizer)    # what a run directory generates with
    generation = generator.generate(["A sentence."], GenerationRequest(beam_size=4, num_return=2))

Translation (`inputs="source"`, an encoder-decoder): sentences are tokenized, laid out as the model reads them
(`layout`: its pieces and end id; an imported checkpoint's language code too), cut to the model's length (and
flagged `truncated`), sorted by length (longest first) and grouped so that each batch holds at most
`batch_tokens` source tokens, padding included; the results come back in input order. Empty inputs (no
tokens) give empty translations without decoding. Each batch is padded to a width that is a multiple of
`length_multiple` and to a power-of-two number of rows (extra rows repeat the first sentence and are dropped),
so a compiled search sees few distinct shapes: XLA compiles once per shape (with a shortlist, also once per
searched-vocabulary size, a multiple of `decoding.shortlist.SIZE_MULTIPLE`). A multilingual model's translations
start with the request's target language (`tgt_lang`, forced), its sources with its source language
(`src_lang`). A request's constraints
(`constraint_rows`) search with the constraint rule, unsharded; its alignments read the model's
cross-attention once the lines are translated (`aligner`). A request that samples (`request.sampling`) searches
`num_return` copies of each line (`searches.samples`), its batches holding that share of `batch_tokens`.

Continuation (`inputs="prompt"`, a causal language model): prompts, `prompts_per_batch` at a time in input
order, keep their last pieces (room for the start id and the continuation) and are fed as forced prefixes
through the same searches (`prompting`); a beam of one samples at the request's temperature.
"""

import numpy as np
import tensorflow as tf
import tqdm

from t2t_keras.decoding import constraint_rows
from t2t_keras.decoding.aligner import Aligner
from t2t_keras.decoding.batch_shapes import LENGTH_MULTIPLE, pad_batch, plan_batches
from t2t_keras.decoding.layout import is_multilingual, layout_of, source_pieces
from t2t_keras.decoding.prompting import continue_prompts
from t2t_keras.decoding.request import LANGUAGES, SHORTLIST_WITH_TERMS, Generation, check_lines, joined
from t2t_keras.decoding.searches import request_options, search
from t2t_keras.decoding.sharding import choose_shards, compiled_search
from t2t_keras.decoding.shortlist import ShortlistTable
from t2t_keras.decoding.weight_precision import check_precision, in_precision
from t2t_keras.errors import T2TError
from t2t_keras.families import check_searchable
from t2t_keras.fast_path import FastPath
from t2t_keras.special_ids import SpecialIds

SOURCE, PROMPT = "source", "prompt"  # what a line is: the source of a translation, or a prompt to continue
INPUTS = (SOURCE, PROMPT)
SEARCH = frozenset({"beam_size", "alpha", "length_penalty", "max_extra_length", "stopping", "max_output_length",
                    "end_at_limit"})
ALIGNMENT = frozenset({"alignments", "alignment_layer", "alignment_heads", "alignment_rows"})
# The request fields each kind of line takes (`GenerationRequest`).
SAMPLING = frozenset({"temperature", "top_k", "top_p", "epsilon", "seed"})  # `decoding.sampling`
ACCEPTS = {SOURCE: SEARCH | ALIGNMENT | SAMPLING | {"num_return", "constraints"},
           PROMPT: SEARCH | SAMPLING}



class Generator:
    """Generates from strings with a model and its tokenizer, in batches (see the module docstring).

    Args:
        model: a built `Transformer`, an `Ensemble` of them (`decoding.ensemble`), or a `CausalLanguageModel`.
        tokenizer: has `tokenize(tf.string (N,)) -> int32 RaggedTensor` (ids without start or end ids) and
            `detokenize(int32 (N, L)) -> tf.string (N,)`, which ignores special ids and what follows the end id.
        inputs: `"source"` (translation) or `"prompt"` (continuation).
        batch_tokens, length_multiple: source-token budget of one batch; batch widths are rounded up to a
            multiple of `length_multiple`.
        jit_compile: compile the searches with XLA (True) or run them in graph mode (False); None or "auto": the
            fast path's choice per batch (`FastPath.decoding_jit`).
        shards: a batch is decoded as this many concurrent searches (`decoding.sharding`); "auto": one per CPU
            core, 1 on a GPU or TPU.
        precision: `"float32"`, or `"bfloat16"` to decode with a copy of the model whose weights are rounded to
            bfloat16 (`decoding.weight_precision`); a model of bfloat16 weights decodes itself in bfloat16, a copy
            of it widened to float32 in float32.
        progress: show a tqdm bar; None shows one for more than `progress_threshold` lines.
        shortlist: None, or a vocabulary shortlist (`data.shortlist.Shortlist`) that restricts each batch's search
            (`decoding.shortlist`).
        prompts_per_batch: prompts continued together.
    """

    def __init__(self, model, tokenizer, inputs=SOURCE, batch_tokens=4096, length_multiple=LENGTH_MULTIPLE,
                 jit_compile=None, shards="auto", precision="float32", progress=None, progress_threshold=100,
                 shortlist=None, prompts_per_batch=32):
        if inputs not in INPUTS:
            raise ValueError(f"inputs must be one of {INPUTS}. Received: inputs={inputs!r}")
        if batch_tokens < length_multiple:
            raise ValueError(f"batch_tokens must be at least length_multiple={length_multiple}. "
                             f"Received: batch_tokens={batch_tokens}")
        check_searchable(model)
        self.precision = check_precision(precision)
        self.model = in_precision(model, precision)
        self.tokenizer, self.inputs = tokenizer, inputs
        self.jit_compile = None if jit_compile is None or jit_compile == "auto" else bool(jit_compile)
        self.batch_tokens, self.length_multiple = batch_tokens, length_multiple
        self.progress, self.progress_threshold = progress, progress_threshold
        self.shards, self.prompts_per_batch = choose_shards(shards), prompts_per_batch
        self.special_ids = getattr(self.model, "special_ids", None) or SpecialIds()
        self.shortlist = None if shortlist is None else ShortlistTable(shortlist, self.model.vocab_size,
                                                                       self.special_ids)
        self._searches = {}  # its compiled searches, built when a batch first needs one

    @property
    def accepts(self):
        """The `GenerationRequest` fields it honours: a multilingual model's languages too, and alignments only
        where no language code stands among the pieces."""
        if self.inputs == PROMPT or not is_multilingual(self.tokenizer):
            return ACCEPTS[self.inputs]
        return ACCEPTS[SOURCE] - ALIGNMENT | set(LANGUAGES)

    def layout(self, request):
        """The `layout.Layout` of the request's sources and translations (its languages, where the model has)."""
        return layout_of(self.tokenizer, self.special_ids, request.src_lang, request.tgt_lang)

    def generate(self, lines, request):
        """The `Generation` of `lines` (a list of str) under `request`, in input order."""
        lines = check_lines(lines)
        if self.inputs == PROMPT:
            return self._continue(lines, request)
        layout = self.layout(request)
        sources, truncated, empty = self.source_rows(lines, layout)
        constraints, errors = self._constraints(request, sources, empty)
        parts = [(batch, self._translate_batch(batch, source, request, constraints, errors, layout))
                 for batch, source in self.batches(sources, empty, request.num_return if request.sampling else 1)]
        generation = joined(parts, len(lines), request.num_return)._replace(truncated=truncated)
        generation = _with_errors(generation, errors)
        if request.alignments:
            aligner = Aligner(self.model, self.tokenizer, request.alignment_layer, request.alignment_heads,
                              request.alignment_rows)
            generation = generation._replace(alignments=[pair.links for pair in aligner.align(lines,
                                                                                              generation.best)])
        return generation

    def uses_xla(self, rows, beam_size=1):
        """Whether a batch of `rows` lines is searched with XLA (else in graph mode, growing its cache)."""
        if self.jit_compile is not None:
            return self.jit_compile
        return FastPath.detect().decoding_jit(self.precision, rows * beam_size)

    def search(self, source, request, constraints=None, target_prefix=()):
        """The `SearchResult` of a padded source batch `(batch, width)` under `request` (with the shortlist, if
        any; with `constraints` int32 `(batch, C, L)` if given; every output starting with the ids
        `target_prefix`), from the compiled search it needs."""
        source = tf.constant(source, tf.int32)
        arguments = [source]
        if constraints is not None:
            if self.shortlist is not None:
                raise T2TError(SHORTLIST_WITH_TERMS)
            arguments.append(tf.constant(constraints, tf.int32))
        elif self.shortlist is not None:
            arguments.append(self.shortlist.output_ids(source))
        if target_prefix:
            arguments.append(tf.constant(target_prefix, tf.int32))
        # a constrained search keeps its rows together (no compaction): XLA's shapes at any batch size
        jit = self.uses_xla(1 if constraints is not None else int(source.shape[0]),
                            request.num_return if request.sampling else request.beam_size)
        return self._compiled(request, jit, constraints is not None, bool(target_prefix))(*arguments)

    def _compiled(self, request, jit, constrained, prefixed):
        """The search of `request`'s settings compiled with XLA (`jit`) or for graph mode, with a forced prefix
        given last (`prefixed`); sharded over `self.shards` unless `constrained`."""
        key = (request.search_key(), jit, constrained, prefixed)
        if key not in self._searches:
            options = request_options(request)
            signature = [tf.TensorSpec([None, None], tf.int32)]
            if constrained:
                signature.append(tf.TensorSpec([None, None, None], tf.int32))
            elif self.shortlist is not None:
                signature.append(tf.TensorSpec([None], tf.int32))  # the batch's searched vocabulary
            if prefixed:
                signature.append(tf.TensorSpec([None], tf.int32))  # the forced prefix of every output

            def decode(source, *extra):
                extra, prefix = (extra[:-1], extra[-1]) if prefixed else (extra, None)
                given = {"constraints" if constrained else "output_ids": extra[0]} if extra else {}
                return search(self.model, source, growing_cache=not jit, forced_prefix=prefix, **given, **options)

            self._searches[key] = compiled_search(decode, jit, 1 if constrained else self.shards, signature)
        return self._searches[key]

    def batches(self, sources, empty=None, copies=1):
        """Yields `(indices, source)` for the batches of `sources` (id arrays, end id included) that hold pieces
        (`empty`: per source, whether it holds none; None: those of one id), longest first: their positions and
        their padded ids (`batch_shapes.pad_batch`, extra rows after `len(indices)`), with the progress bar. Lines
        without pieces are in no batch. A line searched as `copies` rows (its samples) takes that share of the
        budget."""
        empty = [len(ids) <= 1 for ids in sources] if empty is None else empty
        budget = max(self.length_multiple, self.batch_tokens // copies)
        lengths = np.array([0 if none else len(ids) for ids, none in zip(sources, empty)])
        show = self.progress if self.progress is not None else len(sources) > self.progress_threshold
        with tqdm.tqdm(total=len(sources), unit="sentence", disable=not show) as bar:
            bar.update(int(np.sum(lengths == 0)))
            for batch in plan_batches(lengths, budget, self.length_multiple):
                yield batch, pad_batch([sources[i] for i in batch], self.length_multiple, budget,
                                       self.special_ids.pad)
                bar.update(len(batch))

    def source_rows(self, lines, layout=None):
        """Per line, its ids as the model reads them (`layout`'s; None: the model's own, without languages), cut
        to the model's length; whether it was cut; whether it holds no pieces."""
        layout = layout_of(self.tokenizer, self.special_ids) if layout is None else layout
        pieces = self._pieces(lines)
        rows = [layout.source(ids, self.model.max_length) for ids in pieces]
        return ([np.asarray(ids, np.int32) for ids, _ in rows], [cut for _, cut in rows],
                [len(ids) == 0 for ids in pieces])

    def _pieces(self, lines):
        """Per line, its pieces' ids (without the ids a layout adds)."""
        if not lines:
            return []
        ragged = source_pieces(self.tokenizer, tf.constant(lines, tf.string))
        return np.split(ragged.flat_values.numpy(), ragged.row_splits.numpy()[1:-1])

    def _constraints(self, request, sources, empty):
        """Per line, its constraints' ids and None or the error that keeps it from being searched; `(None, [None,
        ...])` without constraints."""
        if request.constraints is None:
            return None, [None] * len(sources)
        if len(request.constraints) != len(sources):
            raise T2TError(f"{len(sources)} lines but {len(request.constraints)} lists of constraints: give one list "
                           "(possibly empty) per line.")
        rows, errors = constraint_rows.term_ids(self.tokenizer, request.constraints, self.special_ids.unk)
        for i, (row, source) in enumerate(zip(rows, sources)):
            errors[i] = errors[i] or (constraint_rows.EMPTY if row and empty[i] else None) or (
                None if empty[i] else constraint_rows.room_error(row, len(source), request.max_extra_length,
                                                                 self.model.max_length))
        return rows, errors

    def _translate_batch(self, batch, source, request, constraints, errors, layout):
        """The `Generation` of the lines `batch` (padded ids `source`)."""
        rows = None
        if constraints is not None:
            rows = constraint_rows.constraint_batch([[] if errors[i] else constraints[i] for i in batch], len(source),
                                                    self.special_ids.pad)
        result = self.search(source, request, rows, layout.target_prefix)
        tokens = result.tokens.numpy()[:len(batch)]
        texts = self.tokenizer.detokenize(tf.reshape(tokens, (-1, tokens.shape[-1]))).numpy()
        texts = [[text.decode("utf-8") for text in texts[i * tokens.shape[1]:(i + 1) * tokens.shape[1]]]
                 for i in range(len(batch))]
        found = [None] * len(batch) if result.satisfied is None else [
            None if ok else constraint_rows.UNSATISFIED for ok in result.satisfied.numpy()[:len(batch)]]
        return Generation(texts, result.scores.numpy()[:len(batch)].tolist(), [False] * len(batch), None, found)

    def _continue(self, lines, request):
        """The continuations of the prompts `lines` (see the module docstring)."""
        longest = max(1, self.model.max_length - request.max_extra_length - 1)  # room for start id and continuation
        pieces = self._pieces(lines)
        parts = []
        for start in range(0, len(lines), self.prompts_per_batch):
            rows = [ids[-longest:] for ids in pieces[start:start + self.prompts_per_batch]]
            batch = np.zeros((len(rows), max(1, max(len(ids) for ids in rows))), np.int32)
            for row, ids in zip(batch, rows):
                row[:len(ids)] = ids
            out = continue_prompts(self.model, batch, **request_options(request))
            texts = [[text.decode("utf-8")] for text in self.tokenizer.detokenize(out["tokens"]).numpy()]
            parts.append((range(start, start + len(rows)), Generation(
                texts, [[float(score)] for score in out["scores"].numpy()], [len(ids) > longest for ids in
                                                                             pieces[start:start + len(rows)]],
                None, [None] * len(rows))))
        return joined(parts, len(lines), 1)


def _with_errors(generation, errors):
    """`generation` with the lines that have an error emptied: "" and score -inf."""
    for i, error in enumerate(errors):
        if error is not None:
            generation.texts[i] = [""] * len(generation.texts[i])
            generation.scores[i] = [float("-inf")] * len(generation.scores[i])
            generation.errors[i] = error
    return generation
