"""Translating lists of strings: tokenize, batch by length under a token budget, search, detokenize."""

import numpy as np
import tensorflow as tf
import tqdm

from t2t_keras.config import DecodingConfig
from t2t_keras.decoding.batch_shapes import LENGTH_MULTIPLE, pad_batch, plan_batches
from t2t_keras.decoding.beam_search import beam_search
from t2t_keras.decoding.greedy import greedy_decode
from t2t_keras.decoding.parameters import DEFAULTS, check_length_penalty
from t2t_keras.decoding.sharding import choose_shards, compiled_search
from t2t_keras.decoding.shortlist import ShortlistTable
from t2t_keras.decoding.stopping import check_stopping
from t2t_keras.decoding.weight_precision import bfloat16_copy, check_precision
from t2t_keras.families import check_searchable
from t2t_keras.fast_path import FastPath
from t2t_keras.special_ids import EOS_ID


class Translator:
    """Translates strings with a `Transformer` and a tokenizer, in batches.

    Sentences are sorted by length (longest first) and grouped so that each
    batch holds at most `batch_tokens` source tokens, padding included; the
    results come back in input order. Empty inputs (no tokens) give empty
    translations without decoding.

    Each batch is padded to a width that is a multiple of `length_multiple` and
    to a power-of-two number of rows (extra rows repeat the first sentence and
    are dropped), so the compiled search sees few distinct shapes: XLA compiles
    once per shape (with a shortlist, also once per searched-vocabulary size,
    a multiple of `decoding.shortlist.SIZE_MULTIPLE`).

    Args:
        model: a built `Transformer`, or an `Ensemble` of them (`decoding.ensemble`).
        tokenizer: has `tokenize(tf.string (N,)) -> int32 RaggedTensor` (ids
            without BOS/EOS) and `detokenize(int32 (N, L)) -> tf.string (N,)`,
            which ignores 0/2/3 and everything after the first EOS.
        params: the search's `DecodingParams` (beam size, 1 for greedy search; alpha; max_extra_length:
            output limit = input length + this, §6.1); `num_return` is 1 here.
        length_penalty: `"gnmt"`, `"average"` or `"none"` (see `beam_search`).
        stopping: `"beam"` or `"exact"`, when the beam search is done with a sentence (`decoding.stopping`).
        batch_tokens: source-token budget of one batch.
        length_multiple: batch widths are rounded up to a multiple of this.
        jit_compile: compile the search with XLA (True) or run it in graph mode (False); None or "auto": the fast
            path's choice per batch (`FastPath.decoding_jit`: XLA for float32 weights, except on a CPU for a
            batch of `GRAPH_SEARCH_HYPOTHESES` hypotheses or more; bfloat16 weights in graph mode).
        precision: `"float32"`, or `"bfloat16"` to decode with a copy of the model whose weights are rounded
            to bfloat16 (see `decoding.weight_precision`: faster for large models and batches on CPUs with
            bfloat16 units, slower otherwise).
        shards: a batch is decoded as this many concurrent searches (see
            `decoding.sharding`); "auto": one per CPU core, 1 on a GPU or TPU.
        progress: show a tqdm bar; None shows one for more than `progress_threshold` sentences.
        progress_threshold: see `progress`.
        shortlist: None searches the whole vocabulary; a vocabulary shortlist (`data.shortlist.Shortlist`,
            e.g. `RunDirectory.load_shortlist()`) restricts each batch's search to the union of its source
            pieces' entries, the frequent pieces and the special ids (`decoding.shortlist`).
    """

    def __init__(self, model, tokenizer, params=DEFAULTS, length_penalty="gnmt", batch_tokens=4096,
                 length_multiple=LENGTH_MULTIPLE, jit_compile=None, shards="auto", precision="float32", progress=None,
                 progress_threshold=100, shortlist=None, stopping=DecodingConfig.stopping):
        self.precision = check_precision(precision)
        check_length_penalty(length_penalty)
        self.stopping = check_stopping(stopping)
        if batch_tokens < length_multiple:
            raise ValueError(
                f"batch_tokens must be at least length_multiple={length_multiple}. "
                f"Received: batch_tokens={batch_tokens}"
            )
        check_searchable(model)
        self.model = bfloat16_copy(model) if precision == "bfloat16" else model
        self.jit_compile = None if jit_compile is None or jit_compile == "auto" else bool(jit_compile)
        self.tokenizer = tokenizer
        self.params = params
        self.length_penalty = length_penalty
        self.batch_tokens = batch_tokens
        self.length_multiple = length_multiple
        self.progress = progress
        self.progress_threshold = progress_threshold
        self.shards = choose_shards(shards)
        self.shortlist = None if shortlist is None else ShortlistTable(shortlist, self.model.vocab_size)
        self._searches = {}  # XLA or not: its compiled search, built when a batch first needs it

    def uses_xla(self, rows):
        """Whether a batch of `rows` sentences is searched with XLA (else in graph mode, growing its cache)."""
        if self.jit_compile is not None:
            return self.jit_compile
        return FastPath.detect().decoding_jit(self.precision, rows * self.params.beam_size)

    def _compiled(self, jit):
        """The search compiled with XLA (`jit`) or for graph mode, sharded over `self.shards`."""
        if jit not in self._searches:
            signature = [tf.TensorSpec([None, None], tf.int32)]
            if self.shortlist is not None:
                signature.append(tf.TensorSpec([None], tf.int32))  # the batch's searched vocabulary

            def decode(source, output_ids=None):
                return self._decode(source, output_ids, growing_cache=not jit)

            self._searches[jit] = compiled_search(decode, jit, self.shards, signature)
        return self._searches[jit]

    def _decode(self, source, output_ids=None, growing_cache=False):
        """Best output ids `(batch, length)` for a padded source batch (over `output_ids` when given)."""
        params = self.params
        if params.method == "greedy":
            return greedy_decode(self.model, source, max_extra_length=params.max_extra_length,
                                 output_ids=output_ids, growing_cache=growing_cache)["tokens"]
        out = beam_search(self.model, source, beam_size=params.beam_size, alpha=params.alpha,
                          length_penalty=self.length_penalty, max_extra_length=params.max_extra_length,
                          output_ids=output_ids, stopping=self.stopping, growing_cache=growing_cache)
        return out["tokens"][:, 0]

    def search(self, source):
        """Best output ids `(batch, length)` of a padded source batch `(batch, width)`, with the shortlist if any."""
        source = tf.constant(source, tf.int32)
        search = self._compiled(self.uses_xla(int(source.shape[0])))
        if self.shortlist is None:
            return search(source)
        return search(source, self.shortlist.output_ids(source))

    def translate(self, sentences):
        """Translations of `sentences` (a list of str), in the same order."""
        sentences = list(sentences)
        translations = [""] * len(sentences)
        for batch, source in self.batches(sentences):
            texts = self.tokenizer.detokenize(self.search(source)).numpy()
            for index, text in zip(batch, texts):
                translations[index] = text.decode("utf-8")
        return translations

    def batches(self, sentences):
        """Yields `(indices, source)` for the batches of `sentences` (a list of str) that hold tokens, longest
        first: their positions in `sentences` and their padded source ids (`batch_shapes.pad_batch`, extra rows
        after `len(indices)`), with the progress bar. Sentences without tokens are in no batch."""
        sources = self._source_ids(sentences)
        lengths = np.array([len(ids) if len(ids) > 1 else 0 for ids in sources])  # EOS alone: empty input
        show = self.progress if self.progress is not None else len(sentences) > self.progress_threshold
        with tqdm.tqdm(total=len(sentences), unit="sentence", disable=not show) as bar:
            bar.update(int(np.sum(lengths == 0)))
            for batch in plan_batches(lengths, self.batch_tokens, self.length_multiple):
                yield batch, pad_batch([sources[i] for i in batch], self.length_multiple, self.batch_tokens)
                bar.update(len(batch))

    def _source_ids(self, sentences):
        """Per sentence, its token ids followed by EOS, cut to the model's maximum length."""
        if not sentences:
            return []
        ragged = self.tokenizer.tokenize(tf.constant(sentences, tf.string))
        pieces = np.split(ragged.flat_values.numpy(), ragged.row_splits.numpy()[1:-1])
        longest = self.model.max_length - 1
        return [np.append(ids[:longest], EOS_ID).astype(np.int32) for ids in pieces]
