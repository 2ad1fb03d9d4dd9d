"""The hardware this process runs on, read here and nowhere else: `Hardware.detect()`.

Every choice made from the hardware (the precision, XLA, oneDNN, auto-clustering, threads, int8, search shards)
is made from a `Hardware` by one table, `t2t_keras.switches.decisions`. A test builds a `Hardware` by hand, so the
table can be evaluated for hardware that is not here (tests/test_hardware_decisions.py), and stubs
`Hardware.detect` to run a command's set-up as it would run there.

TensorFlow reads some of the switches when it starts (`t2t_keras.switches`), so they are chosen before it loads.
`Hardware.detect(before_tensorflow=True)` reads what the system shows without starting TensorFlow: the NVIDIA GPUs
the driver lists (/proc/driver/nvidia/gpus, less those `CUDA_VISIBLE_DEVICES` hides), of unknown compute
capability, and the TPU chips of a TPU VM (/dev/accel*). Once TensorFlow runs, `Hardware.detect()` takes the GPUs
and TPUs TensorFlow sees, with their compute capability. Importing this module imports no TensorFlow.
"""

import dataclasses
import os
import pathlib

UNKNOWN_CAPABILITY = (0, 0)  # a GPU whose compute capability is not known (before TensorFlow, or not reported)


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the fast path depends on.

    Args:
        tpus: TPU cores (or chips, before TensorFlow) present.
        gpu_capabilities: `(major, minor)` compute capability per GPU; `UNKNOWN_CAPABILITY` where not known.
        cpu_flags: the CPU's feature flags (`flags` on x86, `Features` on Arm in /proc/cpuinfo).
        cores: the CPU cores this process may run on.
    """

    tpus: int = 0
    gpu_capabilities: tuple = ()
    cpu_flags: frozenset = frozenset()
    cores: int = 1

    @classmethod
    def detect(cls, before_tensorflow=False):
        """This process's hardware: the accelerators TensorFlow sees, or (`before_tensorflow`) those the system
        lists without starting TensorFlow."""
        tpus, gpus = listed_accelerators() if before_tensorflow else _tensorflow_accelerators()
        return cls(tpus, gpus, usable_cpu_flags(cpu_flags(), os.environ.get("ONEDNN_MAX_CPU_ISA")), cpu_cores())


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


def usable_cpu_flags(flags, max_isa=None):
    """The CPU's flags less those above oneDNN's instruction-set cap (`ONEDNN_MAX_CPU_ISA`, e.g. AVX2): TensorFlow
    sends bfloat16 to oneDNN whenever the CPU reports AVX-512, and oneDNN capped below AVX-512 has no bfloat16
    kernel (a bfloat16 matmul ends the process with SIGSEGV), nor AMX's int8 under a cap below AMX."""
    cap = (max_isa or "").strip().upper()
    if not cap or cap in ("ALL", "DEFAULT") or "AMX" in cap or cap.startswith("AVX10"):
        return frozenset(flags)
    dropped = ("amx",) if cap.startswith("AVX512") else ("avx512", "amx")
    return frozenset(flag for flag in flags if not flag.startswith(dropped))


def cpu_cores():
    """The CPU cores this process may run on (its affinity where the system has one, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def listed_accelerators(root="/", environ=None):
    """`(tpus, gpu_capabilities)` the system lists under `root` without starting TensorFlow: TPU chips as
    dev/accel*, NVIDIA GPUs under proc/driver/nvidia/gpus (at most as many as `CUDA_VISIBLE_DEVICES` names), each
    of `UNKNOWN_CAPABILITY`."""
    environ = os.environ if environ is None else environ
    root = pathlib.Path(root)
    tpus = len(list((root / "dev").glob("accel[0-9]*")))
    gpus = len(list((root / "proc/driver/nvidia/gpus").glob("*")))
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = min(gpus, _visible_count(visible))
    return tpus, (UNKNOWN_CAPABILITY,) * gpus


def _visible_count(visible):
    """How many devices `CUDA_VISIBLE_DEVICES` names: CUDA stops at the first empty or negative entry."""
    count = 0
    for entry in visible.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        count += 1
    return count


def _tensorflow_accelerators():
    """`(tpus, gpu_capabilities)` of the devices TensorFlow sees (not the GPUs a process hid with
    `set_visible_devices`)."""
    import tensorflow as tf

    gpus = tf.config.get_visible_devices("GPU")
    capabilities = tuple(tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability")
                               or UNKNOWN_CAPABILITY) for gpu in gpus)
    return len(tf.config.list_logical_devices("TPU")), capabilities
