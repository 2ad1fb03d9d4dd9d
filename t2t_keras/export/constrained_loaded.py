"""Translating with target terms through an export's `translate_constrained` signature (`constrained_module`).

    translator = SavedModelTranslator("exports/base")
    predict_constrained(translator, ["the red house"], [["rotes Haus"]])
    # {"translations": [...], "scores": [...], "satisfied": [True], "truncated": [False]}
"""

import tensorflow as tf

from t2t_keras.decoding.batch_shapes import pad_rows_to_power_of_two
from t2t_keras.errors import T2TError
from t2t_keras.export.constrained_module import TERM_SEPARATOR

SIGNATURE = "translate_constrained"
UNSATISFIED = ("no translation holding every term was found: the terms need more pieces than the output limit "
               "(source length + max_extra_length) allows, hold characters the vocabulary does not know, or the "
               "input is empty; raise max_extra_length or give fewer terms")


def check_constraint_terms(sentences, constraints):
    """Per sentence of `sentences`, its target terms (`constraints`: lists of non-blank str without TAB), checked."""
    if not isinstance(constraints, (list, tuple)) or len(constraints) != len(sentences):
        raise T2TError(f"constraints must be a list with one list of target terms per sentence ({len(sentences)}), "
                       "e.g. [[\"rotes Haus\"], []].")
    for index, terms in enumerate(constraints):
        if not isinstance(terms, (list, tuple)) or not all(isinstance(t, str) for t in terms):
            raise T2TError(f"constraints[{index}] must be a list of strings (target terms), possibly empty.")
        for term in terms:
            if not term.strip() or TERM_SEPARATOR in term or "\n" in term:
                raise T2TError(f"constraints[{index}] holds {term!r}: a target term must be non-blank text without "
                               "tabs or line breaks.")
    return [list(terms) for terms in constraints]


def predict_constrained(translator, sentences, constraints, params=None):
    """The best translation of each sentence that holds each of its target terms.

    Args:
        translator: a `SavedModelTranslator` of a text export with the `translate_constrained` signature.
        sentences: a list of str.
        constraints: per sentence, a list of target terms (str); [] for none.
        params: `DecodingParams` (`translator.decoding_params`), `num_return` 1; None: the export's defaults.

    Returns:
        dict of per-sentence lists: `translations`, `scores`, `satisfied` (false: "" and a None score; see
        `UNSATISFIED`), `truncated`.
    """
    signatures = getattr(getattr(translator, "saved_model", None), "signatures", {})
    if SIGNATURE not in signatures:
        raise T2TError(f"{translator.path} has no '{SIGNATURE}' signature, so it takes no constraints: export the "
                       "run again with t2t-keras export --constraints (a SavedModel text export), or translate the "
                       "run directory with --terminology.")
    params = params or translator.defaults
    if params.num_return != 1:
        raise T2TError("num_return must be 1 with constraints: the search returns the best translation only.")
    constraints = check_constraint_terms(sentences, constraints)
    pairs = list(zip(sentences, constraints))
    result = {"translations": [], "scores": [], "satisfied": [], "truncated": []}
    for start in range(0, len(pairs), translator.batch_size):
        chunk = pairs[start:start + translator.batch_size]
        out = _call(signatures[SIGNATURE], pad_rows_to_power_of_two(chunk) if translator.jit_compiled else chunk,
                    params)
        result["translations"] += [t.decode("utf-8", errors="replace") for t in out["translations"][:len(chunk)]]
        for name in ("scores", "satisfied", "truncated"):
            result[name] += out[name][:len(chunk)].tolist()
    return result


def _call(signature, rows, params):
    """One call of the signature on `(sentence, terms)` rows; numpy outputs."""
    out = signature(inputs=tf.constant([s for s, _ in rows], tf.string),
                    constraints=tf.constant([TERM_SEPARATOR.join(terms) for _, terms in rows], tf.string),
                    beam_size=tf.constant(params.beam_size, tf.int32), alpha=tf.constant(params.alpha, tf.float32),
                    max_extra_length=tf.constant(params.max_extra_length, tf.int32))
    return {name: value.numpy() for name, value in out.items()}
