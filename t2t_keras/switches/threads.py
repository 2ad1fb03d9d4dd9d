"""How many threads each op of an export's search takes: a share of the cores per shard, or TensorFlow's pool.

A sharded export (`decoding.sharding`) runs a batch as several searches at once on TensorFlow's inter-op
threads. Each op of each search then also splits its work across the intra-op pool, which TensorFlow sizes to
every core. For a narrow model in graph mode those ops are small (a decoding step of `mini` at beam 4, batch 32:
128 rows × 128): the split's synchronisation costs more than it gains, and the shards wait on each other in the
shared pool. One intra-op thread per shard's share of the cores ran the float32 and bfloat16 exports of the
distilled students (width 128) 1.07-1.89× faster at batch 1 and 1.20-1.64× faster at batch 32 with beam 4, and
the `small`-width (256) teacher's 1.39× / 1.44×, with the same translations (2 cores; bench/results/history.md, "One
thread per shard"). A `base`-width model (512) gained at batch 32 (1.13-1.18×) but lost at batch 1
(0.88-0.91×), where its larger products use both cores, and an XLA search ran at half speed at batch 32 (XLA
parallelises within its programs on the same pool): those keep TensorFlow's default.

TensorFlow reads `TF_NUM_INTRAOP_THREADS` once, when its runtime starts, so the choice is made from what the
export recorded (`assets.extra/weights.json`, `search`: its shards, whether every search is in graph mode, the
model width) before anything imports TensorFlow: `choose_intra_op_threads(export_dir)`, which `switches` calls for
an export beside `kernels.choose_onednn`. A value the user set wins, an export that recorded no
`search` (ids-only, or older) keeps TensorFlow's default, and a process that imported TensorFlow already keeps
what it has. The choice is a CPU's (`Decisions.intra_op_threads`, switches/decisions.py): on a GPU or a TPU
TensorFlow's pool stays.

    choose_intra_op_threads("exports/student")   # "1" on 2 cores for a 2-shard graph-mode export of width 128
"""

import dataclasses
import os
import sys

from t2t_keras.switches.decisions import NARROW_WIDTH, Decisions  # noqa: F401 (NARROW_WIDTH: the rule's width)
from t2t_keras.switches.kernels import export_record

VARIABLE = "TF_NUM_INTRAOP_THREADS"


def search_record(shards, graph_mode_only, hidden_dim):
    """What an export records of its search (`weights.json`, key `search`) for the choice made when it loads."""
    return {"shards": int(shards), "graph_mode_only": bool(graph_mode_only), "hidden_dim": int(hidden_dim)}


def threads_per_shard(export_dir, cores=None, decisions=None):
    """The intra-op threads for the searches of the export at `export_dir`, as `decisions` (None: this hardware's,
    `Decisions.before_tensorflow()`) rule on `cores` cores (None: the decisions'), or None where TensorFlow's default
    stays: on a CPU, a narrow (`NARROW_WIDTH`) sharded export searching in graph mode only gets `cores // shards`
    (at least 1)."""
    record = export_record(export_dir)
    search = record.get("search") if record else None
    if not isinstance(search, dict):
        return None
    decisions = Decisions.before_tensorflow() if decisions is None else decisions
    if cores is not None:
        decisions = dataclasses.replace(decisions, cores=cores)
    return decisions.intra_op_threads(search)


def choose_intra_op_threads(export_dir, environ=None, modules=None, cores=None, decisions=None):
    """Sets `TF_NUM_INTRAOP_THREADS` in `environ` (os.environ) to `threads_per_shard`, unless the variable is set
    or TensorFlow is in `modules` (sys.modules) already. Returns the value set, or None where nothing was set."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if VARIABLE in environ or "tensorflow" in modules:
        return None
    threads = threads_per_shard(export_dir, cores, decisions)
    if threads is None:
        return None
    environ[VARIABLE] = str(threads)
    return environ[VARIABLE]


def limit_tensorflow_threads(threads):
    """Runs this process's TensorFlow ops on `threads` cores (its intra-op pool), where its runtime has not started
    yet (a pipeline's worker process, before its model loads); returns whether that took hold."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:  # the runtime started: its pool stays
        return False
    return True
