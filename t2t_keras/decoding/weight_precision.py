"""Decoding with bfloat16 weights: a copy of a trained model whose variables and arithmetic are bfloat16.

    generator = Generator(model, tokenizer, precision="bfloat16")   # or: decoding.precision: bfloat16

A `mixed_bfloat16` model keeps float32 variables and casts every weight to bfloat16 on each decoding step; the
copy holds them in bfloat16 once, so a step reads half the bytes and casts nothing. The search then runs in
graph mode, where TensorFlow computes the matrix products with oneDNN's bfloat16 kernels (AVX512_BF16 or AMX on
x86, BF16 on Arm), instead of XLA, whose bfloat16 products are no faster than float32 on a CPU. It pays off when
the products dominate a step (on a 2-core AVX-512 BF16 machine, `base`, greedy, batch 32: 1.16× the float32 XLA
search; the `mini` model's test set with beam 4: 1.24×, the same BLEU) and not for small models or single
sentences, where graph mode's per-op dispatch dominates (`small`, batch 32: 0.55×; `base`, batch 1: 0.61×); see
"Decoding: the vocabulary product, bfloat16 weights, and the floors" in bench/results/history.md. The outputs are those
of a model rounded to bfloat16: check BLEU on your data before deploying it.

A run of bfloat16 weights (`model.weights_dtype: bfloat16`, `import --precision bfloat16`) is such a model
already: decoding it in bfloat16 takes the model itself, with no copy (`in_precision`), and in float32 a copy
whose weights are its bfloat16 values widened, exactly.
"""

import keras

from t2t_keras.config import DECODING_PRECISIONS as PRECISIONS
from t2t_keras.decoding.ensemble import Ensemble


def check_precision(precision):
    """`precision` if it is one of `PRECISIONS`, else a ValueError naming them."""
    if precision not in PRECISIONS:
        raise ValueError(f"decoding precision must be one of {', '.join(PRECISIONS)}. Received: {precision!r}")
    return precision


def weights_precision(model):
    """"bfloat16" for a model whose variables are bfloat16 (Keras' bfloat16 policy), else "float32" (float32 or
    mixed-precision policies, whose variables are float32)."""
    return "bfloat16" if model.dtype_policy.variable_dtype == "bfloat16" else "float32"


def in_precision(model, precision):
    """`model` itself where its weights are `precision` already, else its copy in `precision` (`precision_copy`);
    of an `Ensemble`, each member so."""
    check_precision(precision)
    if isinstance(model, Ensemble):
        members = [in_precision(member, precision) for member in model.models]
        return model if all(a is b for a, b in zip(members, model.models)) else Ensemble(members)
    return model if weights_precision(model) == precision else precision_copy(model, precision)


def bfloat16_copy(model):
    """`precision_copy(model, "bfloat16")`: every weight rounded to bfloat16."""
    return precision_copy(model, "bfloat16")


def precision_copy(model, precision):
    """A new model of `model`'s class and configuration, built, with weights and arithmetic in `precision`: float32
    weights rounded to bfloat16, or bfloat16 ones widened to float32 (exactly); of an `Ensemble`, the ensemble of its
    members' copies."""
    if isinstance(model, Ensemble):
        return Ensemble([precision_copy(member, precision) for member in model.models])
    copy = model.__class__.from_config({**model.get_config(), "dtype": check_precision(precision)})
    copy.build()
    weights = model.get_weights()
    if len(weights) != len(copy.weights):
        raise ValueError(f"The {precision} copy of {model.name} has {len(copy.weights)} weights, the model "
                         f"{len(weights)}: build the model (call it once or `model.build()`) before copying it.")
    for variable, value in zip(copy.weights, weights):
        variable.assign(keras.ops.cast(value, variable.dtype))
    return copy
