"""Length normalisation of beam-search scores (§6.1, following Wu et al., 2016).

A finished hypothesis Y is ranked by `log P(Y) / lp(Y)` with

* `"gnmt"`: lp(Y) = ((5 + |Y|) / 6) ** alpha, as in tensorflow/models and
  OpenNMT-tf (the paper uses alpha = 0.6);
* `"power"`: lp(Y) = |Y| ** alpha, Hugging Face's `generate` (its `length_penalty` is alpha, 1.0 by default) and
  fairseq's (`--lenpen`); CTranslate2's `length_penalty` too;
* `"average"`: lp(Y) = |Y| (mean log-probability per token);
* `"none"`: lp(Y) = 1 (raw log-probability).

|Y| counts the generated tokens including the final EOS (and a forced first token, such as NLLB's target
language), not the decoder's start id: Hugging Face's `cur_len + 1 - decoder_prompt_len`, fairseq's `step + 1`.

Written in `keras.ops`, as the beam search's step (`beams.py`) that calls it on every backend.
"""

from keras import ops

from t2t_keras.config import LENGTH_PENALTIES


def check_length_penalty(kind):
    """Raises ValueError unless `kind` names a known length penalty."""
    if kind not in LENGTH_PENALTIES:
        raise ValueError(f"length_penalty must be one of {LENGTH_PENALTIES}. Received: length_penalty={kind!r}")


def length_penalty(length, alpha, kind="gnmt"):
    """lp(Y) as float32 for `length` tokens; `length` and `alpha` may be tensors."""
    check_length_penalty(kind)
    length = ops.cast(length, "float32")
    if kind == "gnmt":
        return ops.power((5.0 + length) / 6.0, ops.cast(alpha, "float32"))
    if kind == "power":
        return ops.power(length, ops.cast(alpha, "float32"))
    if kind == "average":
        return length
    return ops.ones_like(length)


def normalized_score(log_prob, length, alpha, kind="gnmt"):
    """The ranking score log P(Y) / lp(Y)."""
    return log_prob / length_penalty(length, alpha, kind)
