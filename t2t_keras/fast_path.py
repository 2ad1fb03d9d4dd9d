"""The fast path of this process: the table's decisions for the hardware at hand, decided once and logged once.

The hardware is read in one place (`Hardware.detect()`, t2t_keras/hardware.py) and every choice made from it in
one table (`Decisions`, t2t_keras/switches/decisions.py): the precision `auto` stands for, XLA or graph mode for a
training step and a search, the fused elementwise ops of a CPU's bfloat16 graph-mode step, the switches set before
TensorFlow loads (XLA's auto-clustering flags, oneDNN, intra-op threads), int8 at export, and the search shards.
docs/performance.md shows the table for each kind of device, with the measurement or the source behind each
choice.

`FastPath.detect()` looks at the hardware the first time it is called and returns the same object afterwards;
`FastPath.of(hardware)` is the fast path of any `Hardware`, present or not. The process-wide switch that fusion
needs is `switches.clustering.xla_auto_clustering`, scoped to the training it is for.
"""

import functools
import logging

from t2t_keras.hardware import Hardware, cpu_flags  # noqa: F401 (their home is hardware.py)
from t2t_keras.switches.decisions import (  # noqa: F401 (their home is switches/decisions.py)
    CPU_BFLOAT16_FLAGS,
    GRAPH_SEARCH_HYPOTHESES,
    Decisions,
    native_precision,
)

logger = logging.getLogger(__name__)


class FastPath(Decisions):
    """The `Decisions` of this process's hardware: `FastPath.detect()` (once per process), or `FastPath.of(hardware)`
    for any hardware."""

    @classmethod
    def detect(cls):
        """The fast path of this process's hardware: detected and logged on the first call, then the same object."""
        return _detected()


@functools.cache
def _detected():
    fast_path = FastPath.of(Hardware.detect())
    logger.info("Fast path: %s.", fast_path.describe())
    return fast_path
