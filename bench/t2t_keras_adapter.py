"""Adapter that runs t2t_keras through the peer benchmark harness (../shared/bench-peers).

    PYTHONPATH=bench:../shared/bench-peers python ../shared/bench-peers/peer_ours.py \
        --adapter t2t_keras_adapter --size small --mode train --jit 1

Training uses the model `t2t-keras train` trains, built by the trainer's own
`compile_model` from the `base` config with the harness's sizes: the `Transformer`,
Adam(0.9, 0.98, 1e-9) on the eq. (3) schedule (`FusedAdam`), the label-smoothed loss and the
trainer's metrics, `jit_compile` as asked, and `training.fuse_elementwise: auto` (XLA-fused
elementwise ops between the oneDNN matmuls for a bfloat16 graph-mode step on a CPU;
`T2T_FUSE_ELEMENTWISE=0|1` overrides it). Decoding is greedy with exactly
`gen_len` tokens: "cached" is `greedy_decode` over the key/value cache in one
XLA-compiled loop; "naive" re-runs the decoder on the whole prefix every step. The search
is built as a run's `Generator` builds its own (`decoding.sharding.compiled_search`, XLA by
`FastPath.decoding_jit`): one concurrent search per CPU core (`T2T_DECODING_SHARDS=N`
overrides it). `T2T_DECODING_PRECISION=bfloat16` decodes as `Generator(precision="bfloat16")`
does: a copy of the model with bfloat16 weights, searched in graph mode (oneDNN's bfloat16 kernels).
`T2T_SHORTLIST=PER_SOURCE,FREQUENT` (e.g. `50,100`, what `t2t-keras shortlist` learns by default) decodes over a
vocabulary shortlist as `translate --shortlist` does (`decoding.shortlist.ShortlistTable`): the harness's weights
and tokens are random, so the table is too (each source id gets PER_SOURCE target ids drawn uniformly, seed 0;
FREQUENT ids allowed everywhere). A batch's searched vocabulary is computed before the compiled search, as the
`Generator` computes it, inside the timed call; it is the union of its source ids' entries, and uniform random ids
make that union as large as it can be for the batch (printed once per size).
"""

import os
import types

import keras
import numpy as np
import tensorflow as tf
from bench_decoding import PrefixRecomputeModel

from t2t_keras.config import load_config, replace
from t2t_keras.decoding import greedy_decode
from t2t_keras.decoding.sharding import choose_shards, compiled_search
from t2t_keras.decoding.shortlist import ShortlistTable
from t2t_keras.decoding.weight_precision import bfloat16_copy, check_precision
from t2t_keras.fast_path import FastPath
from t2t_keras.switches.clustering import set_auto_clustering
from t2t_keras.training.trainer import compile_model


def bench_config(cfg, *, jit, dropout, src_len, tgt_len):
    """The package's config for the harness's size `cfg`, in the global dtype policy the harness set."""
    fuse = {"0": False, "1": True}.get(os.environ.get("T2T_FUSE_ELEMENTWISE", ""), "auto")
    return replace(load_config("base"), model={
        "vocab_size": cfg["vocab"], "hidden_dim": cfg["d_model"], "num_layers": cfg["n_enc"],
        "num_decoder_layers": cfg["n_dec"], "num_heads": cfg["heads"], "intermediate_dim": cfg["d_ff"],
        "dropout": dropout, "max_length": max(src_len, tgt_len) + 64,
    }, training={"mixed_precision": keras.config.dtype_policy().name, "jit_compile": jit, "fuse_elementwise": fuse})


def bench_shortlist(vocab_size):
    """The `ShortlistTable` `T2T_SHORTLIST` asks for (random, see the module docstring), or None."""
    setting = os.environ.get("T2T_SHORTLIST", "")
    if not setting:
        return None
    per_source, frequent = (int(n) for n in setting.split(","))
    rng = np.random.default_rng(0)
    table = types.SimpleNamespace(entries=rng.integers(4, vocab_size, (vocab_size, per_source), dtype=np.int32),
                                  frequent=np.arange(4, 4 + frequent, dtype=np.int32))
    return ShortlistTable(table, vocab_size)


def build_for_bench(cfg, *, jit, dropout, src_len, tgt_len):
    model = compile_model(bench_config(cfg, jit=jit, dropout=dropout, src_len=src_len, tgt_len=tgt_len),
                          tf.distribute.get_strategy())
    fused = model.fuse_elementwise  # what compile_model chose for the training step; on for this process, as `train`
    set_auto_clustering(fused)
    precision = check_precision(os.environ.get("T2T_DECODING_PRECISION", "float32"))
    shortlist = bench_shortlist(cfg["vocab"])

    def make_generate(kind, gen_len):
        decoded = bfloat16_copy(model) if precision == "bfloat16" else model
        searched = {"cached": decoded, "naive": PrefixRecomputeModel(decoded)}.get(kind)
        if searched is None:
            return None
        fixed = dict(max_extra_length=gen_len, max_length=gen_len, min_length=gen_len)
        shards = choose_shards(int(os.environ.get("T2T_DECODING_SHARDS", "0")) or "auto")
        if shortlist is None:
            search = compiled_search(lambda source: greedy_decode(searched, source, **fixed)["tokens"],
                                     FastPath.detect().decoding_jit(precision), shards)
            return lambda source: search(tf.constant(source, tf.int32))
        search = compiled_search(lambda source, ids: greedy_decode(searched, source, output_ids=ids, **fixed)["tokens"],
                                 FastPath.detect().decoding_jit(precision), shards)

        sizes = set()

        def generate(source):  # the batch's searched vocabulary is part of the timed work, as in `Generator`
            source = tf.constant(source, tf.int32)
            ids = shortlist.output_ids(source)
            if ids.shape[0] not in sizes:
                sizes.add(ids.shape[0])
                print(f"shortlist: {ids.shape[0]} of {cfg['vocab']} ids at batch {source.shape[0]}", flush=True)
            return search(source, ids)

        return generate

    variant = "t2t_keras" + ("-xla" if jit else "-fused" if fused else "") + \
        ("-bf16-weights" if precision == "bfloat16" else "") + ("-shortlist" if shortlist is not None else "")
    return types.SimpleNamespace(keras_model=model, make_generate=make_generate, params_total=model.count_params(),
                                 variant=variant)
