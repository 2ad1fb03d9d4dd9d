"""Choosing a `tf.distribute` strategy for the local devices or a TF_CONFIG cluster."""

import json
import os

import tensorflow as tf

from t2t_keras.errors import ConfigError

KINDS = ("auto", "mirrored", "multi_worker", "one_device")


def tf_config_worker_count(tf_config=None):
    """The number of workers (chief included) listed in TF_CONFIG, 0 when there is none.

    Args:
        tf_config: the TF_CONFIG JSON string; read from the environment when `None`.
    """
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG", "")
    if not tf_config.strip():
        return 0
    try:
        cluster = json.loads(tf_config).get("cluster", {})
    except (ValueError, AttributeError) as error:
        raise ConfigError(f"TF_CONFIG is not a JSON object with a 'cluster' key. Received: {tf_config!r}") from error
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def local_devices():
    """Names of all local logical GPUs, or of all logical CPUs when there is no GPU."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return [device.name for device in devices]


def make_strategy(kind="auto", devices=None):
    """Builds the distribution strategy for training.

    Args:
        kind: `"auto"`: `MultiWorkerMirroredStrategy` when TF_CONFIG lists more than one
            worker, else `MirroredStrategy` over `devices` or over `local_devices()` (every
            local GPU, or every logical CPU when there is no GPU; one CPU unless it was
            split with `split_cpu_for_testing`). `"mirrored"`: `MirroredStrategy` over
            `devices` or `local_devices()`. `"multi_worker"`: `MultiWorkerMirroredStrategy`
            from TF_CONFIG. `"one_device"`: `OneDeviceStrategy` on the single entry of
            `devices`, or on the first of `local_devices()`.
        devices: optional device names, e.g. `["/gpu:0", "/gpu:1"]`.

    Returns:
        A `tf.distribute.Strategy`; build and compile the model under its `scope()`.

    Batch sizes given to `fit` are global: each of the `num_replicas_in_sync` replicas gets
    an equal share.
    """
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {KINDS}. Received: kind={kind!r}")
    if devices is not None and not devices:
        raise ConfigError(f"devices must be None or a non-empty list. Received: devices={devices!r}")
    if kind == "auto":
        kind = "multi_worker" if tf_config_worker_count() > 1 else "mirrored"
    if kind == "multi_worker":
        if devices is not None:
            raise ConfigError(
                f"multi_worker uses every local device; do not pass devices. Received: devices={devices!r}"
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    if kind == "one_device":
        if devices is not None and len(devices) != 1:
            raise ConfigError(f"one_device needs exactly one device. Received: devices={devices!r}")
        return tf.distribute.OneDeviceStrategy(devices[0] if devices else local_devices()[0])
    return tf.distribute.MirroredStrategy(devices=list(devices) if devices else local_devices())


def split_cpu_for_testing(num_devices):
    """Splits the physical CPU into `num_devices` logical CPUs, to exercise multi-replica code.

    Must run before TensorFlow initialises its devices (before any op, variable or device
    listing); afterwards the split can no longer change. Calling it again with the same
    number is a no-op.

    Args:
        num_devices: the number of logical CPU devices, >= 1.

    Returns:
        The logical CPU device names.

    Raises:
        RuntimeError: TensorFlow already initialised its devices with another split.
    """
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ConfigError(f"num_devices must be a positive integer. Received: num_devices={num_devices}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or [None]  # unsplit: one device
    if len(current) == num_devices:
        return [device.name for device in tf.config.list_logical_devices("CPU")]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
    except RuntimeError as error:
        raise RuntimeError(
            f"Cannot split the CPU into {num_devices} logical devices: TensorFlow has already initialised "
            f"its devices ({len(tf.config.list_logical_devices('CPU'))} logical CPU). Call "
            "split_cpu_for_testing() first thing in a fresh process, before any TensorFlow op, variable "
            "or device listing."
        ) from error
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def writes_run(kind="auto", tf_config=None):
    """Whether this process writes the run's files (and so takes its lock) when training with strategy `kind`:
    every process but the workers other than the chief of a TF_CONFIG cluster, decided (as `worker_identity`
    decides it) before the strategy is made. `tf_config`: the TF_CONFIG JSON string; read from the environment
    when `None`."""
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG", "")
    if kind not in ("auto", "multi_worker") or tf_config_worker_count(tf_config) <= (1 if kind == "auto" else 0):
        return True
    spec = json.loads(tf_config)
    task = spec.get("task", {})
    return task.get("type") == "chief" or (task.get("type") == "worker" and int(task.get("index", 0)) == 0
                                           and "chief" not in spec.get("cluster", {}))


def worker_identity(strategy):
    """`(is_chief, task_id)` of this process; a single-machine run is its own chief."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    task_id = getattr(resolver, "task_id", None) or 0
    if task_type is None:
        return True, 0
    chief = task_type == "chief" or (task_type == "worker" and task_id == 0 and "chief" not in
                                     resolver.cluster_spec().as_dict())
    return chief, task_id



def worker_count(strategy):
    """The number of workers (chief included) that train together under `strategy`: 1 on one machine."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if getattr(resolver, "task_type", None) is None:
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))
