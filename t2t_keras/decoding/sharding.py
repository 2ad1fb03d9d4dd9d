"""A batch decoded as concurrent shards, one per CPU core.

An XLA-compiled search on a CPU spends most of a step in matrix products too
small to be split across cores (a batch of 32 rows against a 256 × 256
weight), so one search keeps about one core busy. Rows of a greedy or beam
search do not depend on each other; split into shards, the batch runs as
several searches at once on TensorFlow's inter-op threads, and the results are
concatenated in row order. The tokens are those of the unsharded search: each
row is decoded by the same computation (up to the float rounding of a matrix
product of fewer rows, which does not change an argmax except at exact ties).

On a GPU or TPU one search already fills the device, and a search with
random sampling would draw other numbers for a row in another shard: both keep
one shard.
"""

import tensorflow as tf

from t2t_keras.config import check_shards
from t2t_keras.fast_path import FastPath

MIN_ROWS_PER_SHARD = 2


def cpu_cores():
    """The CPU cores this process may run on (`FastPath.cores`), capped by TensorFlow's inter-op thread setting."""
    return _capped(FastPath.detect().cores)


def choose_shards(setting="auto"):
    """Shards for a search: `setting` if an integer, else ("auto") the fast path's (`Decisions.shards`: one per CPU
    core, or 1 with a GPU or TPU), capped by TensorFlow's inter-op thread setting.

    Raises:
        ConfigError (a ValueError): for a setting that is neither "auto" nor a positive integer.
    """
    if check_shards(setting) != "auto":
        return setting
    return _capped(FastPath.detect().shards)


def _capped(shards):
    """`shards`, at most TensorFlow's inter-op threads (where set), at least 1: more would not run at once."""
    threads = tf.config.threading.get_inter_op_parallelism_threads()
    return max(1, min(shards, threads) if threads else shards)


def sharded(search, shards, min_rows=MIN_ROWS_PER_SHARD):
    """`search` applied to `shards` slices of the batch at once, its outputs concatenated in row order.

    Args:
        search: `search(source, *args) -> nested tensors`, every output with
            the batch on axis 0 (a compiled `tf.function`, typically).
        shards: how many slices; 1 returns `search` itself.
        min_rows: a batch with fewer than `shards * min_rows` rows runs as one search.

    Returns:
        a function of the same arguments, for use inside a `tf.function`
        (the graph runtime starts the shards' searches concurrently).
    """
    if shards <= 1:
        return search

    def run(source, *args):
        rows = source.shape[0]
        if rows is not None:  # a static batch size decides while tracing: no branch in the graph
            return _in_shards(search, source, args, shards) if rows >= shards * min_rows else search(source, *args)
        return tf.cond(tf.shape(source)[0] >= shards * min_rows, lambda: _in_shards(search, source, args, shards),
                       lambda: search(source, *args))

    return run


def compiled_search(search, jit_compile, shards, input_signature=None):
    """`search` as a `tf.function` (XLA-compiled if `jit_compile`), run in `shards` concurrent shards if more than 1.

    The searches of `generator.Generator` and of the benchmarks are built here, so they compile and shard alike.
    """
    compiled = tf.function(search, jit_compile=jit_compile, input_signature=input_signature, autograph=False)
    return tf.function(sharded(compiled, shards), input_signature=input_signature,
                       autograph=False) if shards > 1 else compiled


def _in_shards(search, source, args, shards):
    """`search` on `shards` balanced slices of the rows, in order; the outputs concatenated along the rows."""
    rows = tf.shape(source)[0]
    sizes = rows // shards + tf.cast(tf.range(shards) < rows % shards, tf.int32)
    outputs = [search(part, *args) for part in tf.split(source, sizes, num=shards)]
    return tf.nest.map_structure(lambda *parts: None if parts[0] is None else tf.concat(parts, axis=0), *outputs)
