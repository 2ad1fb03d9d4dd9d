"""The fast path for the hardware at hand: `training.mixed_precision: auto` and `training.jit_compile: auto`.

`auto` precision takes bfloat16 where the hardware computes it natively (TPUs, GPUs of compute capability
8.0 or more, CPUs with AVX512_BF16 or AMX-BF16, Arm CPUs with the BF16 extension), float16 on GPUs of
compute capability 7.x (tensor cores; Keras adds dynamic loss scaling), and float32 elsewhere. `auto` XLA
compiles the training step except for bfloat16 on a CPU, where TensorFlow's graph mode runs the oneDNN
bfloat16 kernels and XLA does not (docs/results.md has the measurements behind both rules).

`training.fuse_elementwise: auto` completes that graph-mode path: the matmuls stay oneDNN kernels and XLA
compiles only the elementwise and reduction ops between them (dropout, residual sums, LayerNorm, softmax,
casts, the loss) into fused kernels, by TensorFlow's auto-clustering restricted to fusible ops.
"""

import dataclasses
import logging

import tensorflow as tf

logger = logging.getLogger(__name__)

AUTO = "auto"
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
CPU_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX-512 / AMX; Arm's BF16 extension


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the fast path depends on: accelerators present and the CPU's feature flags."""

    tpus: int = 0
    gpu_capabilities: tuple = ()  # (major, minor) per GPU
    cpu_flags: frozenset = frozenset()

    @classmethod
    def detect(cls):
        gpus = tf.config.list_physical_devices("GPU")
        capabilities = tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability") or (0, 0)
                             for gpu in gpus)
        return cls(len(tf.config.list_logical_devices("TPU")), capabilities, cpu_flags())


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's feature flags (`flags` on x86, `Features` on Arm); empty where /proc/cpuinfo is missing."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def native_precision(hardware):
    """The mixed precision policy `auto` stands for on `hardware`, and why."""
    if hardware.tpus:
        return "mixed_bfloat16", "TPU"
    if hardware.gpu_capabilities:
        oldest = min(hardware.gpu_capabilities)
        if oldest >= (8, 0):
            return "mixed_bfloat16", f"GPU compute capability {oldest[0]}.{oldest[1]}"
        if oldest >= (7, 0):
            return "mixed_float16", f"GPU compute capability {oldest[0]}.{oldest[1]} (float16 tensor cores)"
        return "float32", f"GPU compute capability {oldest[0]}.{oldest[1]} (no fast half precision)"
    found = sorted(set(CPU_BFLOAT16_FLAGS) & hardware.cpu_flags)
    if found:
        return "mixed_bfloat16", "CPU with " + ", ".join(found)
    return "float32", "CPU without bfloat16 instructions"


def choose_precision(setting, hardware=None):
    """`training.mixed_precision` as a Keras dtype policy name, `auto` resolved for `hardware` (detected if None)."""
    if setting != AUTO:
        return setting
    policy, reason = native_precision(hardware or Hardware.detect())
    logger.info("training.mixed_precision=auto: %s (%s).", policy, reason)
    return policy


def choose_jit(setting, precision, hardware=None):
    """`training.jit_compile` as a bool: `auto` is XLA except for bfloat16 on a CPU-only machine."""
    if setting != AUTO:
        return bool(setting)
    hardware = hardware or Hardware.detect()
    on_cpu = not hardware.tpus and not hardware.gpu_capabilities
    jit = not (on_cpu and precision == "mixed_bfloat16")
    logger.info("training.jit_compile=auto: %s.", "XLA" if jit else "graph mode (oneDNN bfloat16 kernels, no XLA)")
    return jit


def on_cpu_only(hardware):
    return not hardware.tpus and not hardware.gpu_capabilities


def choose_fusion(setting, precision, jit, hardware=None):
    """`training.fuse_elementwise` as a bool: `auto` is on for a graph-mode (not XLA) bfloat16 step on a CPU."""
    if setting != AUTO:
        return bool(setting)
    fuse = not jit and precision == "mixed_bfloat16" and on_cpu_only(hardware or Hardware.detect())
    logger.info("training.fuse_elementwise=auto: %s.", "XLA-fused elementwise ops between the oneDNN matmuls"
                if fuse else "off")
    return fuse


def fuse_elementwise(enabled):
    """Turns TensorFlow's auto-clustering on or off for the functions traced from now on in this process.

    `compile_model` calls it with the run's choice; `train` restores the process's setting after `fit`, so the
    evaluation, export and decoding that follow in the same process are not affected.
    """
    tf.config.optimizer.set_jit("autoclustering" if enabled else False)
