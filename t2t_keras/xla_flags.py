"""TensorFlow XLA flags the package needs set before TensorFlow optimizes its first graph.

`training.fuse_elementwise` (training/precision.py) turns TensorFlow's auto-clustering on for a graph-mode step
on a CPU. Auto-clustering reads two flags from `TF_XLA_FLAGS` once per process: one lets it run on CPUs, one
restricts it to fusible (elementwise and reduction) ops, so the matmuls stay oneDNN kernels. Both are inert
while auto-clustering is off, which is TensorFlow's default. Importing `t2t_keras` adds them.
"""

import os

XLA_CPU_FLAGS = ("--tf_xla_cpu_global_jit", "--tf_xla_ops_to_cluster=FUSIBLE")


def prepare_xla_flags(environ=None):
    """Adds `XLA_CPU_FLAGS` to `TF_XLA_FLAGS`, keeping the user's flags; a user's own value of a flag wins."""
    environ = os.environ if environ is None else environ
    flags = environ.get("TF_XLA_FLAGS", "").split()
    names = {flag.split("=")[0] for flag in flags}
    flags += [flag for flag in XLA_CPU_FLAGS if flag.split("=")[0] not in names]
    environ["TF_XLA_FLAGS"] = " ".join(flags)
