"""The SavedModel's `translate_constrained` signature: translations that hold given target terms.

    t2t-keras export --run-dir runs/x --out exports/x --constraints      # adds the signature

    translate_constrained(inputs, constraints, beam_size, alpha, max_extra_length)
        inputs        tf.string (N,)  UTF-8 sentences
        constraints   tf.string (N,)  each sentence's target terms joined by TAB ("" for none)
    ->  translations  tf.string (N,)  the best translation holding every term ("" where `satisfied` is false)
        scores        float32 (N,)    its score (-inf where `satisfied` is false)
        satisfied     bool (N,)       false: the terms do not fit in the sentence's output limit, a term holds a
                                      character the tokenizer does not know, or the input is empty
        truncated     bool (N,)       the input was cut to `max_source_length` pieces

A signature has no optional inputs, so the constraints come as their own signature beside `translate`; a
sentence with "" takes exactly `translate`'s search (`decoding.constrained`: a beam of one is greedy search).
Terms are tokenized in the graph with the export's tokenizer, each alone (the form a word has after a space,
`data.terminology`); blank terms are skipped. The search is `constrained_beam_search`, chosen with
`tf.switch_case` as `translate`'s searches are: a beam of one and one search for every larger beam size (the
beam size a tensor), or with XLA one search per size from 1 to `max_beam_size`. A sentence that
fails gets `satisfied` false; the other sentences of the call translate. The search covers the whole vocabulary,
also in an export made with a shortlist; a multilingual export's translates between the languages chosen at
import.
"""

import tensorflow as tf

from t2t_keras.decoding import searches
from t2t_keras.decoding.layout import source_pieces, target_pieces
from t2t_keras.errors import T2TError
from t2t_keras.export.search_table import SearchTable
from t2t_keras.export.signature_functions import function
from t2t_keras.export.translator_module import PARAMETER_SPECS, STRINGS_SPEC, TranslatorModule, prepare_source
from t2t_keras.special_ids import SpecialIds

CONSTRAINTS_SPEC = tf.TensorSpec([None], tf.string, name="constraints")
TERM_SEPARATOR = "\t"


def constraint_ids(tokenizer, constraints, ids=SpecialIds()):
    """int32 `(N, C, L)` target pieces of the TAB-separated target terms of each string of `constraints` `(N,)`,
    padded with the model's padding id (C, L >= 1); and bool `(N,)`: the rows with a piece the tokenizer does not
    know (the unknown id of the model's `ids`)."""
    terms = tf.strings.split(constraints, TERM_SEPARATOR)  # (N, (terms))
    terms = tf.ragged.boolean_mask(terms, tf.strings.length(tf.strings.strip(terms)) > 0)
    pieces = target_pieces(tokenizer, terms.flat_values)  # (terms, (pieces))
    rows = tf.RaggedTensor.from_row_splits(pieces, terms.row_splits).to_tensor(default_value=ids.pad)  # (N, C, L)
    shape = tf.shape(rows)
    rows = tf.pad(rows, [[0, 0], [0, tf.maximum(1 - shape[1], 0)], [0, tf.maximum(1 - shape[2], 0)]],
                  constant_values=ids.pad)
    return rows, tf.reduce_any(tf.equal(rows, ids.unk), axis=[1, 2])


class ConstrainedTranslatorModule(TranslatorModule):
    """`TranslatorModule` with the `translate_constrained` signature (text exports; see the module docstring).

    The signature adds its own searches (two in graph mode, one per beam size with XLA), which makes an export
    slower to write and larger in memory: exports have it when asked for (`export --constraints`).
    """

    def __init__(self, model, tokenizer=None, **options):
        if tokenizer is None:
            raise T2TError("--constraints needs a text export (the terms are tokenized in the graph): leave out "
                           "--ids-only.")
        super().__init__(model, tokenizer, **options)
        self._constrained_table = SearchTable(self._constrained_search, self._max_beam_size, self._jit_compile)

    def signatures(self):
        signatures = super().signatures()
        if self.tokenizer is not None:
            signatures["translate_constrained"] = self.functions.translate_constrained.get_concrete_function()
        return signatures

    def _make_functions(self):
        super()._make_functions()
        if self.tokenizer is not None:
            self.functions.translate_constrained = function(
                self._translate_constrained, (STRINGS_SPEC, CONSTRAINTS_SPEC) + PARAMETER_SPECS[:3])

    def _translate_constrained(self, inputs, constraints, beam_size, alpha, max_extra_length):
        """The best translation of each sentence that holds its terms; see the module docstring."""
        pad, layout = self._ids.pad, self._layout
        source_ids = source_pieces(self.tokenizer, inputs).to_tensor(default_value=pad)
        source, truncated, empty = prepare_source(source_ids, self.model.max_length, self.model.vocab_size, self._ids,
                                                  layout.source_prefix, layout.source_suffix)
        ids, unknown = constraint_ids(self.tokenizer, constraints, self._ids)
        with tf.control_dependencies(self._check_parameters(beam_size, alpha, max_extra_length, tf.constant(1))):
            max_extra_length = tf.minimum(max_extra_length, self.model.max_length)  # no int32 overflow
        ids = tf.where(unknown[:, None, None], pad, ids)  # the search runs; the sentence fails
        tokens, scores, satisfied = self._search_constrained(source, ids, beam_size, alpha, max_extra_length)
        has_terms = tf.reduce_any(tf.not_equal(ids, pad), axis=[1, 2])
        satisfied &= tf.logical_not(unknown) & tf.logical_not(empty & has_terms)
        texts = self.tokenizer.detokenize(tf.where((satisfied & tf.logical_not(empty))[:, None], tokens, pad))
        return {"translations": texts, "scores": tf.where(satisfied, tf.where(empty, 0.0, scores), float("-inf")),
                "satisfied": satisfied, "truncated": truncated}

    def _search_constrained(self, source, ids, beam_size, alpha, max_extra_length):
        """Tokens, scores and `satisfied` of the constrained search `beam_size` chooses (its `SearchTable`: with
        XLA one search per beam size, in graph mode a beam of one and one search for every larger beam, as
        `translate`'s)."""
        bound = tf.shape(source)[1] + max_extra_length
        if self._max_output_length is not None:
            bound = tf.minimum(bound, self._max_output_length)
        return self._constrained_table.select((source, ids, alpha, max_extra_length, bound), beam_size)

    def _constrained_search(self, beam_size, num_return=1):
        """The constrained search for one beam size (None: any, given last), as a function of its own (see
        `TranslatorModule._new_search_function`)."""

        def search(source, constraints, alpha, max_extra_length, bound, *size):
            result = searches.search(self.model, source, beam_size=size[0] if size else beam_size, alpha=alpha,
                                     length_penalty=self._length_penalty, max_extra_length=max_extra_length,
                                     max_length=bound, stopping=self._stopping, constraints=constraints,
                                     growing_cache=not self._jit_compile, max_output_length=self._max_output_length,
                                     end_at_limit=self._end_at_limit,
                                     forced_prefix=self._layout.target_prefix or None)
            return result.tokens[:, 0], result.scores[:, 0], result.satisfied

        scalar = tf.TensorSpec([], tf.int32)
        signature = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, None], tf.int32),
                     tf.TensorSpec([], tf.float32), scalar, scalar) + ((scalar,) if beam_size is None else ())
        return function(search, signature, jit_compile=self._jit_compile, experimental_attributes={"_noinline": True})
