"""`training.mixed_precision`, `training.jit_compile` and `training.fuse_elementwise`: `auto` resolved.

`auto` takes the fast path of the hardware at hand (`t2t_keras.fast_path`, decided once per process): bfloat16
where the hardware computes it natively, float16 on GPUs of compute capability 7.x, float32 elsewhere; XLA except
for bfloat16 on a CPU, where TensorFlow's graph mode runs the oneDNN bfloat16 kernels; and for that graph-mode
step, XLA-fused elementwise and reduction ops between the oneDNN matmuls (dropout, residual sums, LayerNorm,
softmax, casts, the loss), by TensorFlow's auto-clustering restricted to fusible ops.
"""

import logging

from t2t_keras.fast_path import FastPath

logger = logging.getLogger(__name__)

AUTO = "auto"
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def choose_precision(setting, fast_path=None):
    """`training.mixed_precision` as a Keras dtype policy name, `auto` resolved for `fast_path` (detected if None)."""
    if setting != AUTO:
        return setting
    fast_path = fast_path or FastPath.detect()
    logger.info("training.mixed_precision=auto: %s (%s).", fast_path.precision, fast_path.reason)
    return fast_path.precision


def choose_jit(setting, precision, fast_path=None):
    """`training.jit_compile` as a bool: `auto` is XLA except for bfloat16 on a CPU-only machine."""
    if setting != AUTO:
        return bool(setting)
    jit = (fast_path or FastPath.detect()).jit(precision)
    logger.info("training.jit_compile=auto: %s.", "XLA" if jit else "graph mode (oneDNN bfloat16 kernels, no XLA)")
    return jit


def choose_fusion(setting, precision, jit, fast_path=None):
    """`training.fuse_elementwise` as a bool: `auto` is on for a graph-mode (not XLA) bfloat16 step on a CPU."""
    if setting != AUTO:
        return bool(setting)
    fuse = (fast_path or FastPath.detect()).fuse_elementwise(precision, jit)
    logger.info("training.fuse_elementwise=auto: %s.", "XLA-fused elementwise ops between the oneDNN matmuls"
                if fuse else "off")
    return fuse
