"""The fast path for the hardware at hand, decided once per process and logged once.

What the hardware offers decides four things, for training, decoding and export alike:

- the device (`tpu`, `gpu` or `cpu`): with neither a TPU nor a GPU the process is CPU-only, where a training step
  in bfloat16 runs in graph mode and a batch is decoded as one concurrent search per core (decoding/sharding.py);
- the precision `auto` stands for: bfloat16 where the hardware computes it natively (TPUs, GPUs of compute
  capability 8.0 or more, CPUs with AVX512_BF16 or AMX-BF16, Arm CPUs with the BF16 extension), float16 on GPUs
  of compute capability 7.x (tensor cores; Keras adds dynamic loss scaling), and float32 elsewhere;
- XLA: the training step is compiled except for bfloat16 on a CPU, where TensorFlow's graph mode runs the oneDNN
  bfloat16 kernels and XLA does not; a search is compiled for float32 weights only (decoding/weight_precision.py),
  and on a CPU only below `GRAPH_SEARCH_HYPOTHESES` hypotheses a batch (larger batches drop their done sentences
  in graph mode, decoding/compaction.py);
- fusion: that bfloat16 graph-mode step on a CPU gets XLA-fused elementwise ops between its oneDNN matmuls
  (TensorFlow's auto-clustering restricted to fusible ops; `switches/xla.py` sets what restricts it).

docs/results.md has the measurements behind these rules. `FastPath.detect()` looks at the hardware the first
time it is called and returns the same object afterwards; the process-wide switch that fusion needs is
`switches.clustering.xla_auto_clustering`, scoped to the training it is for.
"""

import dataclasses
import functools
import logging

import tensorflow as tf

logger = logging.getLogger(__name__)

# A CPU's float32 search of this many hypotheses (rows x beam size) or more runs in graph mode: beam 4 over a
# 256-wide model, 32 rows 1.3x faster than XLA, 128 rows 2.1x; 16 rows 0.8x (docs/results.md)
GRAPH_SEARCH_HYPOTHESES = 128
CPU_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX-512 / AMX; Arm's BF16 extension


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the fast path depends on: accelerators present and the CPU's feature flags."""

    tpus: int = 0
    gpu_capabilities: tuple = ()  # (major, minor) per GPU
    cpu_flags: frozenset = frozenset()

    @classmethod
    def detect(cls):
        gpus = tf.config.get_visible_devices("GPU")  # not those a process hid with set_visible_devices
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


@dataclasses.dataclass(frozen=True)
class FastPath:
    """The hardware's fast path: build it with `FastPath.detect()` (once per process) or `FastPath.of(hardware)`.

    Args:
        device: "tpu", "gpu" or "cpu" (neither a TPU nor a GPU: a CPU-only process).
        precision: the Keras dtype policy the hardware computes natively (`auto`).
        reason: why that precision, for the log.
    """

    device: str
    precision: str
    reason: str

    @classmethod
    def of(cls, hardware):
        device = "tpu" if hardware.tpus else "gpu" if hardware.gpu_capabilities else "cpu"
        return cls(device, *native_precision(hardware))

    @classmethod
    def detect(cls):
        """The fast path of this process's hardware: detected and logged on the first call, then the same object."""
        return _detected()

    @property
    def cpu_only(self):
        return self.device == "cpu"

    @property
    def bfloat16(self):
        """Whether the hardware computes bfloat16 natively (its `auto` precision is mixed_bfloat16)."""
        return self.precision == "mixed_bfloat16"

    def jit(self, precision):
        """XLA for a training step in `precision`: yes, except bfloat16 on a CPU (oneDNN's graph-mode kernels)."""
        return not (self.cpu_only and precision == "mixed_bfloat16")

    def fuse_elementwise(self, precision, jit):
        """XLA-fused elementwise ops for a graph-mode (not XLA) bfloat16 training step on a CPU."""
        return not jit and precision == "mixed_bfloat16" and self.cpu_only

    def decoding_jit(self, weights, hypotheses=1):
        """XLA for a search over `weights` ("float32" or "bfloat16") of `hypotheses` (rows x beam size) at once.

        bfloat16 products are faster in graph mode (oneDNN) than under XLA on a CPU (decoding/weight_precision.py).
        On a CPU a float32 search of `GRAPH_SEARCH_HYPOTHESES` or more is faster in graph mode too, where it drops
        its done sentences (decoding/compaction.py); a smaller one is faster with XLA (fewer, fused ops).
        """
        return weights == "float32" and not (self.cpu_only and hypotheses >= GRAPH_SEARCH_HYPOTHESES)

    def describe(self):
        jit = self.jit(self.precision)
        fused = self.fuse_elementwise(self.precision, jit)
        step = "XLA" if jit else "graph mode with XLA-fused elementwise ops" if fused else "graph mode"
        cpu_batches = f" (graph mode from {GRAPH_SEARCH_HYPOTHESES} hypotheses a batch)" if self.cpu_only else ""
        return (f"{self.device.upper()}; auto precision {self.precision} ({self.reason}); auto training step: "
                f"{step}; search: XLA for float32 weights{cpu_batches}, graph mode for bfloat16 weights")


@functools.cache
def _detected():
    fast_path = FastPath.of(Hardware.detect())
    logger.info("Fast path: %s.", fast_path.describe())
    return fast_path
