"""A summary of a configuration: architecture, parameter count, training FLOPs per target token."""

from t2t_keras.errors import T2TError
from t2t_keras.params import adapter_parameters, count_parameters, training_flops_per_target_token


def describe_command(run_dir=None, config="base", overrides=(), vocab_size=None, sequence_length=32):
    """`t2t-keras describe`: of the run at `run_dir` (its saved config and the run it started from), else of the
    config `config` with `overrides` (and `vocab_size`, when given)."""
    from t2t_keras.config import load_config, replace
    from t2t_keras.runs import open_run

    if run_dir is not None:
        if overrides or vocab_size is not None:
            raise T2TError("describe --run-dir describes the run's saved config: leave out --set and --vocab-size.")
        run = open_run(run_dir)
        return describe(run.load_config(), sequence_length, init_from=run.read_json(run.init_from_path))
    loaded = load_config(config, overrides)
    return describe(loaded if vocab_size is None else replace(loaded, model={"vocab_size": vocab_size}),
                    sequence_length)


def describe(config, sequence_length=32, init_from=None):
    """A flat dict describing `config.model` (the `--json` output of `t2t-keras describe`).

    `params` counts every weight, `trainable_params` those training updates and `frozen_params` the rest: with
    `training.lora_rank` set the adapters alone train (`params` includes them) and every other weight is frozen.
    `init_from` is a run's RUN/init_from.json, if any.
    """
    m, rank = config.model, config.training.lora_rank
    counts = count_parameters(m)
    if rank is not None:
        counts["adapters"] = adapter_parameters(m, rank)
        counts["total"] += counts["adapters"]
    trainable = counts["adapters"] if rank is not None else counts["total"]
    return {
        "architecture": m.architecture,
        "params": counts["total"],
        "trainable_params": trainable,
        "frozen_params": counts["total"] - trainable,
        "lora_rank": rank,
        "init_from": init_from,
        "params_by_part": {k: v for k, v in counts.items() if k != "total"},
        "vocab_size": m.vocab_size,
        "tokenizer": config.data.tokenizer,
        "hidden_dim": m.hidden_dim,
        "num_layers": m.num_layers,
        "num_decoder_layers": m.decoder_layers if m.architecture == "encoder_decoder" else None,
        "num_heads": m.num_heads,
        "key_dim": m.head_key_dim,
        "value_dim": m.head_value_dim,
        "intermediate_dim": m.intermediate_dim,
        "dropout": m.dropout,
        "label_smoothing": config.training.label_smoothing,
        "position_encoding": m.position_encoding,
        "tie_embeddings": m.tie_embeddings,
        "softmax": m.softmax,
        "adaptive_cutoffs": m.adaptive_cutoffs,
        "normalize_first": m.normalize_first,
        "train_flops_per_target_token": training_flops_per_target_token(m, sequence_length, sequence_length),
        "flops_sequence_length": sequence_length,
    }


def format_description(info):
    """Human-readable lines for `describe()`'s dict."""
    norm = "pre-LN" if info["normalize_first"] else "post-LN (paper)"
    parts = ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in info["params_by_part"].items() if v)
    stacks = {"encoder_decoder": f"N={info['num_layers']} encoder / {info['num_decoder_layers']} decoder layers",
              "decoder_only": f"decoder-only (causal LM), N={info['num_layers']} layers",
              "encoder_only": f"encoder-only (masked LM), N={info['num_layers']} layers"}[info["architecture"]]
    return "\n".join(
        [
            f"Transformer: {stacks}, "
            f"d_model={info['hidden_dim']}, d_ff={info['intermediate_dim']}, h={info['num_heads']}, "
            f"d_k={info['key_dim']}, d_v={info['value_dim']}",
            f"  P_drop={info['dropout']}, eps_ls={info['label_smoothing']}, {info['position_encoding']} positions, "
            f"embeddings tied: {info['tie_embeddings']}, {norm}",
            f"  vocabulary: {info['vocab_size']} ({info['tokenizer']})",
            f"  parameters: {info['params']:,} ({info['params'] / 1e6:.1f}M: {parts})"
            + (f"; trainable: {info['trainable_params']:,}, the rank-{info['lora_rank']} adapters alone; frozen: "
               f"{info['frozen_params']:,}" if info["lora_rank"] is not None else ""),
            f"  training FLOPs per target token: {info['train_flops_per_target_token'] / 1e6:.1f} MFLOP "
            f"(source and target length {info['flops_sequence_length']}, matmuls only)",
        ] + _init_from_lines(info["init_from"])
    )


def _init_from_lines(record):
    if not record:
        return []
    steps = ", ".join(map(str, record["steps"]))
    return [f"  started from: {record['run']} ({record['source']} weights, step {steps}; {record['checkpoint']})"]
