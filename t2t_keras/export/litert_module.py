"""The `tf.Module` a LiteRT export converts: tokenizer, encoder, cache and search in builtin ops and TF-Text ops.

One signature, `translate(sentence, beam_size, alpha, max_extra_length)`:
a batch of one sentence, tf.string `(1,)`, and int32 / float32 / int32
scalars in; `translation` tf.string `(1,)`, `score` float32 `(1,)` and
`truncated` bool `(1,)` out. `beam_size` 1 is
greedy search (score: the log-probability); above 1, beam search with the
export's length penalty (`((5+|Y|)/6)^alpha` by default; score: the normalised
one), the best hypothesis only. An imported OPUS-MT checkpoint's file decodes
with its own ids and its generation defaults (`max_output_length`,
`end_at_limit`). A LiteRT signature has no optional inputs, so the export's
defaults are asked for by value: `beam_size` 0, a negative `alpha` or a
negative `max_extra_length` take the default recorded at export (also in
the file's metadata). LiteRT has no assertion op: a `beam_size` above
`max_beam_size` is clamped to it (`artifacts.litert` checks the
parameters first). A second signature with the defaults built in would
hold a second copy of the whole graph.

One sentence per call: TF-Text's TFLite detokenizer kernel
(`sentencepiece_detokenizer_tflite.cc`, TF-Text 2.21.1) writes its strings
without setting its output's shape, which keeps the shape of the first call;
a batch of N > 1 then comes back as one string and the next read crashes.
With one sentence the shape is always right. (Not a scalar: the LiteRT
Python binding copies a 0-d string array's raw bytes, not its string.)

The search is the SavedModel's (`decoding.greedy`, `decoding.beams`
over the preallocated key/value cache, `prepare_source` for the input), so
the tokens are the same. What makes it convert to builtin ops only:

* the weights are read as constants (a `keras.StatelessScope` maps every
  variable to its value while tracing): variables read inside the search's
  `while` would become LiteRT resource variables that nothing initialises;
* the beam sizes are chosen by a chain of `tf.cond` (LiteRT `IF`), one
  search per size: TensorFlow's `Case` has no LiteRT op. The weights are
  made constants inside each branch (the encoder runs there too): weights
  passed into an `IF` as operands are not quantized by the converter's
  dynamic-range quantization. The converter stores identical constant
  buffers once, so each beam size adds graph structure, not weights;
* the key/value cache is written with `dynamic_update_slice` and the token
  buffers with selects; no TensorList ops.
"""

import functools

import keras
import tensorflow as tf

from t2t_keras.decoding import searches
from t2t_keras.decoding.parameters import check_beam_size, check_integer
from t2t_keras.decoding.request import DEFAULTS
from t2t_keras.export.litert_tokenizer import LiteRTTokenizer
from t2t_keras.export.search_table import SearchTable
from t2t_keras.export.signature_functions import scalar_specs
from t2t_keras.export.source_ids import prepare_source
from t2t_keras.export.translator_module import MAX_BEAM_SIZE

SENTENCE_SPEC = tf.TensorSpec([1], tf.string, name="sentence")
PARAMETER_SPECS = scalar_specs(beam_size=tf.int32, alpha=tf.float32, max_extra_length=tf.int32)


class LiteRTModule(tf.Module):
    """Tokenizer + frozen model + searches; `signatures()` gives the functions the converter takes.

    Args:
        model: a built `Transformer` (float32 weights; the converter quantizes).
        tokenizer: its SentencePiece `Tokenizer` (bpe or unigram).
        max_beam_size: largest beam size; one search is traced per size from 1 to this.
        request: the default `GenerationRequest` (asked for by value, see the module docstring), whose
            `length_penalty` and `stopping` every search keeps.
    """

    def __init__(self, model, tokenizer, max_beam_size=MAX_BEAM_SIZE, request=DEFAULTS, name=None):
        super().__init__(name=name)
        check_beam_size(request.beam_size, check_integer("max_beam_size", max_beam_size))
        self.tokenizer = LiteRTTokenizer(tokenizer)
        self.max_beam_size, self.request = max_beam_size, request
        # The model stays out of the module's tracked state: the functions read its weights as constants.
        weights = [(variable, keras.ops.convert_to_numpy(variable)) for variable in model.variables]
        self._table = SearchTable(functools.partial(self._search, model, weights), max_beam_size, per_size=True)

        def translate(sentence, beam_size, alpha, max_extra_length):
            return self._translate(model, sentence, beam_size, alpha, max_extra_length)

        # No autograph: the loops and branches are tf.while_loop and tf.cond already.
        self.translate = tf.function(translate, input_signature=(SENTENCE_SPEC,) + PARAMETER_SPECS, autograph=False)

    def signatures(self):
        """The signature functions by name, for `tf.saved_model.save` and the converter."""
        return {"translate": self.translate.get_concrete_function()}

    def _parameters(self, beam_size, alpha, max_extra_length, max_length):
        """The search's parameters: the defaults where asked for (see the module docstring), within range."""
        defaults = self.request
        beam_size = tf.where(beam_size <= 0, defaults.beam_size, tf.minimum(beam_size, self.max_beam_size))
        alpha = tf.where(alpha < 0.0, defaults.alpha, alpha)
        max_extra_length = tf.where(max_extra_length < 0, defaults.max_extra_length, max_extra_length)
        return beam_size, alpha, tf.minimum(max_extra_length, max_length)  # no int32 overflow

    def _translate(self, model, sentence, beam_size, alpha, max_extra_length):
        """The translation of `sentence`; see the module docstring."""
        ids = self.tokenizer.sides.ids  # the model's own
        source_ids = self.tokenizer.tokenize(sentence)  # (1, width)
        source, truncated, empty = prepare_source(source_ids, model.max_length, model.vocab_size, ids)
        beam_size, alpha, max_extra_length = self._parameters(beam_size, alpha, max_extra_length, model.max_length)
        bound = tf.shape(source)[1] + max_extra_length
        if self.request.max_output_length is not None:
            bound = tf.minimum(bound, self.request.max_output_length)
        tokens, scores = self._table.select_by_conds((source, alpha, max_extra_length, bound), beam_size)
        tokens = tf.where(empty[:, None], ids.pad, tokens)  # (1, bound)
        return {"translation": self.tokenizer.detokenize(tokens), "score": tf.where(empty, 0.0, scores),
                "truncated": truncated}

    def _search(self, model, weights, beam_size, num_return):
        """The search of one beam size: tokens `(batch, bound)` and scores `(batch,)`, its weights made constants
        inside its branch (see the module docstring)."""

        def search(source, alpha, max_extra_length, bound):
            with keras.StatelessScope(state_mapping=weights):
                result = searches.search(model, source, beam_size=beam_size, alpha=alpha,
                                         length_penalty=self.request.length_penalty,
                                         max_extra_length=max_extra_length, max_length=bound,
                                         stopping=self.request.stopping,
                                         max_output_length=self.request.max_output_length,
                                         end_at_limit=self.request.end_at_limit)
            return result.tokens[:, 0], result.scores[:, 0]

        return search
