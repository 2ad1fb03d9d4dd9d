"""A training step that fits in memory: the estimate (t2t_keras/memory.py) against the machine, before the first step.

Where the step of a batch of `data.batch_tokens` does not fit, each batch is split into micro-batches of its
rows, whose gradients are summed into one update (training/accumulation.py): the update, the effective batch and
the input stream stay those of the configured batch, only less of it is in memory at once. The split is the
smallest that fits, logged and recorded in RUN/memory.json. Where even one sequence of `data.max_length` per
replica does not fit, `train` refuses, with the numbers and the fix.

The memory compared: `training.memory_limit_gb` when set; else on a GPU its device memory (`nvidia-smi`), and on
a CPU what /proc/meminfo calls MemAvailable (or the cgroup's limit less its usage, where that is lower) and what
the process holds already (the estimate counts the process itself). Replicas on logical devices of one CPU share
that memory, each with its own weights; GPUs each hold their replica's.
"""

import dataclasses
import logging
import os
import pathlib
import subprocess

from t2t_keras.data.batching import bucket_plan
from t2t_keras.errors import ConfigError
from t2t_keras.fast_path import FastPath
from t2t_keras.memory import GB, estimate

logger = logging.getLogger(__name__)


def _read_int(path):
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8").split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def host_memory(meminfo="/proc/meminfo", cgroup="/sys/fs/cgroup"):
    """`(bytes, where)`: MemAvailable, or the cgroup's limit less its usage where lower; `(None, why)` unknown."""
    available, where = None, "no /proc/meminfo"
    try:
        for line in pathlib.Path(meminfo).read_text(encoding="utf-8").splitlines():
            if line.startswith("MemAvailable:"):
                available, where = int(line.split()[1]) * 1024, "MemAvailable"
    except OSError:
        pass
    for limit_file, usage_file in (("memory.max", "memory.current"),  # cgroup v2, then v1
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        limit, usage = _read_int(pathlib.Path(cgroup, limit_file)), _read_int(pathlib.Path(cgroup, usage_file))
        if limit is not None and usage is not None and (available is None or limit - usage < available):
            available, where = limit - usage, f"the cgroup's limit ({pathlib.Path(cgroup, limit_file)}) less its usage"
    return available, where


def resident_bytes(statm="/proc/self/statm"):
    """This process' resident memory (bytes), 0 where /proc is missing: it holds part of the estimate already."""
    try:
        return int(pathlib.Path(statm).read_text(encoding="utf-8").split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def gpu_memory():
    """`(bytes, where)`: the smallest GPU's memory (`nvidia-smi`), or `(None, why)`."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return min(int(line) for line in out.split()) * 2 ** 20, "the GPU's memory (nvidia-smi)"
    except (OSError, subprocess.SubprocessError, ValueError):
        return None, "nvidia-smi did not report the GPU's memory"


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The batch split chosen, the estimate of its step and the memory it was compared with."""

    split: int  # parts each batch is split into (1: none)
    estimate: object  # the `memory.MemoryEstimate` of the chosen split's step
    available: object  # bytes, or None where unknown
    where: str  # where `available` comes from
    unsplit: object  # the estimate of the whole batch's step

    def record(self):
        """RUN/memory.json."""
        return {"batch_split": self.split, "estimate_bytes": self.estimate.total, "parts": self.estimate.parts,
                "micro_batch_rows": self.estimate.rows, "length": self.estimate.length,
                "precision": self.estimate.precision, "unsplit_estimate_bytes": self.unsplit.total,
                "available_bytes": self.available, "available_from": self.where}


def _with_own(free, where):
    """The memory this process may reach: what is free and what it holds already (the estimate counts both)."""
    return (None, where) if free is None else (free + resident_bytes(), f"{where} and this process' own")


def largest_batch_rows(config, replicas):
    """Sequences in a batch of the largest bucket (data.max_length), as the batching plans it."""
    d = config.data
    return bucket_plan(d.max_length, d.batch_tokens, num_replicas=replicas).batch_sizes[-1]


def _step_estimate(config, rows, replicas, split, on_gpu):
    """The estimate of a step on a batch of `rows` split `split` ways, in the memory that is compared."""
    t = config.training
    part = -(-rows // (split * replicas)) * replicas  # accumulation.split_batches
    return estimate(config.model, t.mixed_precision, part // replicas if on_gpu else part, config.data.max_length,
                    lora_rank=t.lora_rank, accumulating=split * t.gradient_accumulation_steps > 1,
                    copies=1 if on_gpu else replicas, runtime=not on_gpu)


def _splits(rows, replicas):
    """The splits that make a micro-batch smaller, from 1 (none) to one row per replica."""
    sizes = {}
    for split in range(1, rows // replicas + 1):
        sizes.setdefault(-(-rows // (split * replicas)), split)
    return sorted(sizes.values())


def plan_memory(config, replicas=1):
    """The `MemoryPlan` of `config` (precision resolved) on `replicas` replicas; refuses (ConfigError) a step that
    does not fit even with one sequence per replica."""
    on_gpu = FastPath.detect().device == "gpu"
    if config.training.memory_limit_gb is not None:
        available, where = int(config.training.memory_limit_gb * GB), "training.memory_limit_gb"
    elif on_gpu:
        available, where = gpu_memory()
    else:
        available, where = _with_own(*host_memory())
    rows = largest_batch_rows(config, replicas)
    unsplit = _step_estimate(config, rows, replicas, 1, on_gpu)
    if available is None:
        logger.info("The memory available is unknown (%s): the training step's estimate, %s, is not checked.", where,
                    unsplit.describe())
        return MemoryPlan(1, unsplit, None, where, unsplit)
    for split in _splits(rows, replicas):
        step = _step_estimate(config, rows, replicas, split, on_gpu)
        if step.total <= available:
            if split > 1:
                logger.warning("A training step of data.batch_tokens=%d needs about %s, more than the %.3g GB "
                               "available (%s): each batch is split into %d micro-batches of at most %d sequences, "
                               "accumulated into one update (about %.1f GB).", config.data.batch_tokens,
                               unsplit.describe(), available / GB, where, split, step.rows, step.total / GB)
            return MemoryPlan(split, step, available, where, unsplit)
    raise ConfigError(_refusal(config, step, available, where))


def _refusal(config, step, available, where):
    m, d = config.model, config.data
    return (f"A training step of this model does not fit in memory even with one sequence of data.max_length="
            f"{d.max_length} tokens per micro-batch: it needs about {step.describe()}, and {available / GB:.3g} GB "
            f"are available ({where}). Train a smaller model (model.hidden_dim={m.hidden_dim}, model.num_layers="
            f"{m.num_layers}, model.vocab_size={m.vocab_size}), lower data.max_length, or use a machine with more "
            "memory.")
