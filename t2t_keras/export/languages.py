"""A multilingual export's languages per call: the `src_lang` and `tgt_lang` inputs of its signatures.

An NLLB or M2M-100 export's `translate` (and `translate_ids`) take two more scalar tf.string inputs, `src_lang` and
`tgt_lang`: language codes of the checkpoint ("" for the languages chosen at import, which `serving_default`
uses). The source language's code goes where the checkpoint's tokenizer puts it (`decoding.layout`), the target
language's is forced as the first output token. A code the checkpoint lacks fails the call with
InvalidArgumentError naming it; the export's variable `language_codes` lists the codes (M2M-100's `__en__` may be
given as `en`).
"""

import tensorflow as tf

from t2t_keras.export.signature_functions import scalar_specs

LANGUAGE_SPECS = scalar_specs(src_lang=tf.string, tgt_lang=tf.string)


class ExportLanguages:
    """The language codes of an export's tokenizer and its defaults, read in the graph.

    Args:
        tokenizer: a multilingual `PretrainedTokenizer` (`decoding.layout.is_multilingual`).
        layout: the `decoding.layout.Layout` of the languages chosen at import.
    """

    def __init__(self, tokenizer, layout):
        self.tokenizer = tokenizer
        self.codes = sorted(tokenizer.language_codes)
        self.source, self.target = tokenizer.languages
        self.source_id = tokenizer.language_id(self.source)
        self.target_id = layout.target_prefix[0]

    def ids(self, src_lang, tgt_lang):
        """`(prefix, suffix, target_prefix)`: the source's ids around its pieces and the forced first output; a code
        the checkpoint lacks fails the call (an assertion)."""
        source = self._id(src_lang, self.source_id)
        target = self._id(tgt_lang, self.target_id)
        checks = [tf.debugging.Assert(identifier >= 0, [f"{field} (", code, ") is not a language code of this "
                                      "model: the export's variable language_codes lists its codes"])
                  for field, code, identifier in (("src_lang", src_lang, source), ("tgt_lang", tgt_lang, target))]
        with tf.control_dependencies(checks):
            source, target = tf.identity(source), tf.identity(target)
        prefix, suffix = self.tokenizer.source_affixes(source)
        return prefix, suffix, tf.reshape(target, [1])

    def _id(self, code, default):
        """The id of `code`, a scalar string ("" : `default`), -1 for a code the checkpoint lacks."""
        found = self.tokenizer.language_ids(code)
        return tf.where(tf.equal(code, ""), tf.constant(default, tf.int32), found)
