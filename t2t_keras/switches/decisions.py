"""Every choice made from the hardware, in one table: `Decisions.of(hardware)`.

The hardware is read in one place (`Hardware.detect()`, t2t_keras/hardware.py); everything that chooses from it
reads these decisions instead of looking for itself. A `Hardware` built by hand shows what would be chosen on
hardware that is not here (tests/test_hardware_decisions.py; docs/performance.md has the table per device).

    choice                        CPU                                         GPU / TPU
    precision (`auto`)            bfloat16 with AVX512_BF16/AMX/Arm BF16      bfloat16 (TPU, GPU >= 8.0),
                                  units, else float32                          float16 (GPU 7.x), else float32
    training step (`auto`)        XLA, graph mode for bfloat16 (oneDNN)       XLA
    fused elementwise ops         for that bfloat16 graph-mode step           no
    search                        XLA for float32 below 128 hypotheses        XLA for float32 weights
    TF_XLA_FLAGS (training)       the CPU auto-clustering flags               not set
    TF_ENABLE_ONEDNN_OPTS         0 for a float32 search                      not set
    TF_NUM_INTRAOP_THREADS        cores / shards, narrow sharded export       not set
    oneDNN's allocator            glibc's for serve --model-base-path         not set
    local pipeline worker threads cores / workers                             not set
    CTranslate2 threads           one search a core, one thread each          (CTranslate2 runs on the CPU)
    export --quantization auto    int8 with AMX from 5M parameters            float32
    search shards (`auto`)        one per core                                one

A rule here takes what the hardware does not decide (the precision chosen, the weights, the export's record) as
arguments. Importing this module imports no TensorFlow: the switches choose from it before TensorFlow loads.
"""

import dataclasses

from t2t_keras.hardware import Hardware
from t2t_keras.switches.xla import XLA_CPU_FLAGS

CPU_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX-512 / AMX; Arm's BF16 extension
# A CPU's float32 search of this many hypotheses (rows x beam size) or more runs in graph mode: beam 4 over a
# 256-wide model, 32 rows 1.3x faster than XLA, 128 rows 2.1x; 16 rows 0.8x (docs/results.md)
GRAPH_SEARCH_HYPOTHESES = 128
# bench/results/history.md, "Deployment engines on CPU" (2-core Xeon with AVX-512 VNNI and AMX): int8 was slower than
# float32 at batch 1 for the 1.9M-parameter main job model and faster with beam 4 at batch 1 and 32 for `small`
# (7.6M) and at every point for `base`; the threshold lies between. On a 2-core AMD EPYC with AVX-512 VNNI and
# no AMX, int8 was slower than float32 at every point for 1.9M to 6.6M parameters ("Beam search that stops when
# the beam is spent"): int8 is chosen only where AMX's int8 tiles are, the one CPU where it measured faster.
INT8_AUTO_MIN_PARAMS = 5_000_000
INT8_CPU_FLAGS = ("amx_int8",)  # Intel AMX; VNNI alone (AVX-512 or AVX) and Arm's dot products: not measured faster
NARROW_WIDTH = 256  # widest hidden_dim measured faster at batch 1 and 32 with one thread per shard (threads.py)


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
class Decisions:
    """What the hardware decides: build it with `Decisions.of(hardware)`.

    Args:
        device: "tpu", "gpu" or "cpu" (neither a TPU nor a GPU: a CPU-only process).
        precision: the Keras dtype policy the hardware computes natively (`auto`).
        reason: why that precision, for the log.
        cores: the CPU cores the process may run on.
        int8_units: the CPU's `INT8_CPU_FLAGS` (AMX's int8 tiles), where int8 weights measured faster.
    """

    device: str
    precision: str
    reason: str
    cores: int = 1
    int8_units: tuple = ()

    @classmethod
    def of(cls, hardware):
        device = "tpu" if hardware.tpus else "gpu" if hardware.gpu_capabilities else "cpu"
        int8_units = tuple(sorted(set(INT8_CPU_FLAGS) & set(hardware.cpu_flags)))
        return cls(device, *native_precision(hardware), hardware.cores, int8_units)

    @classmethod
    def before_tensorflow(cls):
        """The decisions for this process's hardware as the system lists it before TensorFlow starts: what the
        switches TensorFlow reads when it starts are chosen from (`Hardware.detect(before_tensorflow=True)`)."""
        return cls.of(Hardware.detect(before_tensorflow=True))

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

    @property
    def xla_flags(self):
        """The `TF_XLA_FLAGS` a command that trains adds (CPU auto-clustering, switches/xla.py); None off a CPU,
        where no step clusters (`fuse_elementwise` is for a CPU's graph-mode step only)."""
        return XLA_CPU_FLAGS if self.cpu_only else None

    def onednn(self, arithmetic):
        """`TF_ENABLE_ONEDNN_OPTS` for a search computing in `arithmetic` ("float32", "bfloat16", "int8", None:
        unknown): "0" (TensorFlow's own kernels, switches/kernels.py) for float32 on a CPU; else None, not set."""
        return "0" if self.cpu_only and arithmetic == "float32" else None

    def onednn_allocator(self, versions_swap):
        """`TF_ONEDNN_USE_SYSTEM_ALLOCATOR` for a process whose models come and go (`versions_swap`: a server of a
        model base path): "1" on a CPU, where oneDNN's own allocator keeps the memory of two versions loaded during
        a swap for the life of the process (+132 and +169 MB after two swaps of a 30M-weight float32 SavedModel,
        +57 and +83 MB in bfloat16; with glibc's allocator +13 / +26 and -6 / +7; a translation's CPU time 1.01x,
        bench/results/model-versions.md); else None, not set."""
        return "1" if self.cpu_only and versions_swap else None

    def intra_op_threads(self, search):
        """`TF_NUM_INTRAOP_THREADS` for an export whose record says `search` (`threads.search_record`, or None):
        `cores // shards` (at least 1) for a narrow sharded graph-mode search on a CPU (switches/threads.py); else
        None, TensorFlow's pool."""
        if not self.cpu_only or not isinstance(search, dict):
            return None
        shards, width = search.get("shards"), search.get("hidden_dim")
        if not (isinstance(shards, int) and isinstance(width, int)) or shards < 2 or width > NARROW_WIDTH \
                or search.get("graph_mode_only") is not True:
            return None
        return max(1, self.cores // shards)

    def ctranslate2_threads(self, cores=None):
        """`(inter_threads, intra_threads)` of a CTranslate2 translator on `cores` cores (None: the process's):
        one search per core, each on one thread. On 2 cores, beam 4, against CTranslate2's default (one search on
        every core): the main job's `mini` export 4.0x the lines/s in 32-line batches and 6.4x at batch 1, a
        width-512 model 1.5x and 2.5x, the same tokens (bench/results/ctranslate2-threads.md). CTranslate2 runs
        on the CPU whatever the machine's accelerators."""
        return max(1, cores or self.cores), 1

    def worker_threads(self, workers):
        """The cores each of `workers` processes decoding side by side on this machine (the local pipeline
        runner's workers) takes: an equal share (at least 1) on a CPU, where each would otherwise start a pool of
        every core and they would contend; None on a GPU or TPU (the device decodes; its host threads stay)."""
        return max(1, self.cores // workers) if self.cpu_only else None

    @property
    def shards(self):
        """Concurrent searches a batch is split into (`decoding.shards: auto`): one per core on a CPU, where one
        search keeps about one core busy (decoding/sharding.py); one on a GPU or TPU, which one search fills and
        where every shard would run on the same device."""
        return self.cores if self.cpu_only else 1

    def quantization(self, num_params):
        """`(quantization, reason)` for `export --quantization auto`: "int8" where it measured faster, else None."""
        if not self.cpu_only:
            return None, (f"float32: exported on a {self.device.upper()}, where int8 Dense weights were never "
                          "measured faster (AMX CPUs only); --quantization int8 forces them")
        if num_params < INT8_AUTO_MIN_PARAMS:
            return None, (f"float32: {num_params:,} parameters, under the {INT8_AUTO_MIN_PARAMS:,} where int8 Dense "
                          "weights begin to pay on a CPU (slower at batch 1 below); --quantization int8 forces them")
        if not self.int8_units:
            return None, (f"float32: this CPU has no {', '.join(INT8_CPU_FLAGS)} (AMX), the only int8 units where "
                          "int8 weights measured faster than float32 (slower with AVX-512 VNNI alone); "
                          "--quantization int8 forces int8 weights")
        return "int8", (f"int8: {num_params:,} parameters, at least {INT8_AUTO_MIN_PARAMS:,}, and the CPU has "
                        f"{', '.join(self.int8_units)}; --quantization float32 keeps float32 weights")

    def summary(self):
        """Each choice as words, for the usual arguments: this hardware's row of the table in docs/performance.md."""
        jit = self.jit(self.precision)
        fused = self.fuse_elementwise(self.precision, jit)
        step = "XLA" if jit else "graph mode, fused elementwise ops" if fused else "graph mode"
        search = "XLA" if self.decoding_jit("float32", GRAPH_SEARCH_HYPOTHESES) else \
            f"XLA below {GRAPH_SEARCH_HYPOTHESES} hypotheses, then graph mode"
        narrow = {"shards": 2, "graph_mode_only": True, "hidden_dim": 128}  # threads.search_record(2, True, 128)
        return {"precision": self.precision, "training step": step, "float32 search": search,
                "TF_XLA_FLAGS (training)": "CPU auto-clustering" if self.xla_flags else "not set",
                "TF_ENABLE_ONEDNN_OPTS (float32 search)": self.onednn("float32") or "not set",
                "TF_ONEDNN_USE_SYSTEM_ALLOCATOR (serve --model-base-path)": self.onednn_allocator(True) or "not set",
                "TF_NUM_INTRAOP_THREADS (2-shard narrow export)": str(self.intra_op_threads(narrow) or "not set"),
                "export quantization (10M parameters)": self.quantization(10_000_000)[0] or "float32",
                "search shards": str(self.shards),
                "CTranslate2 searches x threads": "{} x {}".format(*self.ctranslate2_threads()),
                "threads per local pipeline worker (2 workers)": str(self.worker_threads(2) or "not set")}

    def describe(self):
        jit = self.jit(self.precision)
        fused = self.fuse_elementwise(self.precision, jit)
        step = "XLA" if jit else "graph mode with XLA-fused elementwise ops" if fused else "graph mode"
        cpu_batches = f" (graph mode from {GRAPH_SEARCH_HYPOTHESES} hypotheses a batch)" if self.cpu_only else ""
        return (f"{self.device.upper()}; auto precision {self.precision} ({self.reason}); auto training step: "
                f"{step}; search: XLA for float32 weights{cpu_batches}, graph mode for bfloat16 weights; "
                f"{self.shards} search shard{'s' if self.shards > 1 else ''}")
