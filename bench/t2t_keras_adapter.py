"""Adapter that runs t2t_keras through the peer benchmark harness (../shared/bench-peers).

    PYTHONPATH=bench:../shared/bench-peers python ../shared/bench-peers/peer_ours.py \
        --adapter t2t_keras_adapter --size small --mode train --jit 1

Training uses the package as `t2t-keras train` does: the `Transformer` model,
Adam(0.9, 0.98, 1e-9) on the eq. (3) schedule (`FusedAdam`) and the label-smoothed loss,
`model.fit` with `jit_compile` as asked, and `training.fuse_elementwise: auto` (XLA-fused
elementwise ops between the oneDNN matmuls for a bfloat16 graph-mode step on a CPU;
`T2T_FUSE_ELEMENTWISE=0|1` overrides it). Decoding is greedy with exactly
`gen_len` tokens: "cached" is `greedy_decode` over the key/value cache in one
XLA-compiled loop; "naive" re-runs the decoder on the whole prefix every step. As the
`Translator` and the SavedModel do, a batch is decoded as one concurrent search per CPU
core (`decoding.sharding`; `T2T_DECODING_SHARDS=N` overrides it).
`T2T_DECODING_PRECISION=bfloat16` decodes as `Translator(precision="bfloat16")` does: a
copy of the model with bfloat16 weights, searched in graph mode (oneDNN's bfloat16 kernels).
"""

import os
import types

import keras
import tensorflow as tf
from bench_decoding import PrefixRecomputeModel

from t2t_keras.decoding import greedy_decode
from t2t_keras.decoding.sharding import choose_shards, sharded
from t2t_keras.decoding.weight_precision import bfloat16_copy, check_precision
from t2t_keras.model import Transformer
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from t2t_keras.training.precision import choose_fusion, fuse_elementwise
from t2t_keras.training.schedule import make_optimizer


def build_for_bench(cfg, *, jit, dropout, src_len, tgt_len):
    model = Transformer(vocab_size=cfg["vocab"], hidden_dim=cfg["d_model"], num_layers=cfg["n_enc"],
                        num_decoder_layers=cfg["n_dec"], num_heads=cfg["heads"], intermediate_dim=cfg["d_ff"],
                        dropout=dropout, max_length=max(src_len, tgt_len) + 64)
    model.build()
    model.compile(optimizer=make_optimizer(cfg["d_model"]), loss=LabelSmoothedCrossEntropy(0.1), jit_compile=jit)
    setting = {"0": False, "1": True}.get(os.environ.get("T2T_FUSE_ELEMENTWISE", ""), "auto")
    fused = choose_fusion(setting, keras.config.dtype_policy().name, jit)
    fuse_elementwise(fused)

    precision = check_precision(os.environ.get("T2T_DECODING_PRECISION", "float32"))

    def make_generate(kind, gen_len):
        decoded = bfloat16_copy(model) if precision == "bfloat16" else model
        searched = {"cached": decoded, "naive": PrefixRecomputeModel(decoded)}.get(kind)
        if searched is None:
            return None
        fixed = dict(max_extra_length=gen_len, max_length=gen_len, min_length=gen_len)
        compiled = tf.function(lambda source: greedy_decode(searched, source, **fixed)["tokens"],
                               jit_compile=precision == "float32")
        shards = choose_shards(int(os.environ.get("T2T_DECODING_SHARDS", "0")) or "auto")
        search = tf.function(sharded(compiled, shards))
        return lambda source: search(tf.constant(source, tf.int32))

    variant = "t2t_keras" + ("-xla" if jit else "-fused" if fused else "") + \
        ("-bf16-weights" if precision == "bfloat16" else "")
    return types.SimpleNamespace(keras_model=model, make_generate=make_generate, params_total=model.count_params(),
                                 variant=variant)
