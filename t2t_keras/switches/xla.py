"""The TensorFlow XLA flags a command that trains sets before TensorFlow optimizes its first graph.

`training.fuse_elementwise` (fast_path.py) turns TensorFlow's auto-clustering on for a graph-mode step on a CPU.
Auto-clustering reads three flags from `TF_XLA_FLAGS`: one lets it run on CPUs, one restricts it to fusible
(elementwise and reduction) ops, so the matmuls stay oneDNN kernels, and one compiles the clusters in the
background. All three are inert while auto-clustering is off, which is TensorFlow's default.

TensorFlow compiles each cluster once for each input shape it runs on: `mini`'s step holds about 230 clusters and
its batches come in 7 bucket shapes. Compiled in line, as TensorFlow does by default, the first step waited for all
its clusters (104-170 s on 2 busy cores) and the first steps of each new shape for theirs (65-80 s each): 7 updates
in the first 6 minutes of `mini`. Compiled in the background (`--tf_xla_async_compilation`), a step whose clusters
are not ready yet runs their ops unfused, as plain graph mode does, and takes the compiled clusters once they are:
101 updates in the same 6 minutes, back to back on the same busy machine (docs/results.md). Unfused ops may round
bfloat16 differently from a fused cluster, so which of the first steps ran fused depends on when the compilations
finished, and two runs of one config may differ in that rounding (compiled in line, the first step of each new
shape after the first ran unfused too, but in every run alike). `TF_XLA_FLAGS=--tf_xla_async_compilation=false` in
the environment compiles in line again.

TensorFlow parses `TF_XLA_FLAGS` once, when its runtime starts (the first op or device listing), not at the first
XLA compilation. Measured with TF 2.21 and an unknown flag: set after `import tensorflow` but before the first op,
TensorFlow aborts at that op; set after the first op, it is never read. So the commands that train set them first
thing (`switches.command_switches`). A process that started TensorFlow before (a notebook, a test) keeps its own
flags: without `--tf_xla_cpu_global_jit` auto-clustering leaves a CPU step unclustered (plain graph mode, slower,
the same numbers); set the flags in its environment before it starts to have them.

They are a CPU's flags (`Decisions.xla_flags`, switches/decisions.py): on a GPU or a TPU a training step is
compiled whole with XLA and clusters nothing, and `TF_XLA_FLAGS` is left as it is.
"""

import os

VARIABLE = "TF_XLA_FLAGS"
XLA_CPU_FLAGS = ("--tf_xla_cpu_global_jit", "--tf_xla_ops_to_cluster=FUSIBLE", "--tf_xla_async_compilation=true")


def prepare_xla_flags(environ=None, wanted=XLA_CPU_FLAGS):
    """Adds the `wanted` flags (`Decisions.xla_flags`: `XLA_CPU_FLAGS` on a CPU, None elsewhere, which sets
    nothing) to `TF_XLA_FLAGS`, keeping the user's flags; a user's own value of a flag wins."""
    environ = os.environ if environ is None else environ
    if not wanted:
        return
    flags = environ.get(VARIABLE, "").split()
    names = {flag.split("=")[0] for flag in flags}
    flags += [flag for flag in wanted if flag.split("=")[0] not in names]
    environ[VARIABLE] = " ".join(flags)
