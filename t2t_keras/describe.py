"""A summary of a configuration: architecture, parameter count, training FLOPs per target token, step memory."""

from t2t_keras.errors import T2TError
from t2t_keras.memory import GB, estimate, format_parts
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
    counts = _parameter_counts(m, rank)
    trainable = counts["adapters" if rank is not None else "total"]
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
        "training_step_memory": step_memory(config),
    }


def _parameter_counts(model_config, rank):
    """`count_parameters`, with the rank-`rank` adapters (training.lora_rank) as a part of their own."""
    counts = count_parameters(model_config)
    if rank is not None:
        counts["adapters"] = adapter_parameters(model_config, rank)
        counts["total"] += counts["adapters"]
    return counts


def step_memory(config):
    """The estimated peak memory of a training step on one batch of the largest bucket (t2t_keras/memory.py):
    data.batch_tokens // data.max_length sequences of data.max_length tokens, at training.mixed_precision
    (`auto`: float32, the larger; train resolves it from the hardware), on one replica."""
    d, t = config.data, config.training
    precision = "float32" if t.mixed_precision == "auto" else t.mixed_precision
    step = estimate(config.model, precision, max(1, d.batch_tokens // d.max_length), d.max_length,
                    lora_rank=t.lora_rank, accumulating=t.gradient_accumulation_steps > 1)
    return {"total_bytes": step.total, "parts": step.parts, "batch_tokens": d.batch_tokens, "rows": step.rows,
            "length": step.length, "precision": precision}


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
            _memory_line(info["training_step_memory"]),
        ] + _init_from_lines(info["init_from"])
    )


def _memory_line(memory):
    return (f"  training step memory: about {memory['total_bytes'] / GB:.1f} GB at data.batch_tokens="
            f"{memory['batch_tokens']} ({memory['rows']} x {memory['length']} tokens, {memory['precision']}; "
            f"{format_parts(memory['parts'])} GB)")


def _init_from_lines(record):
    if not record:
        return []
    steps = ", ".join(map(str, record["steps"]))
    return [f"  started from: {record['run']} ({record['source']} weights, step {steps}; {record['checkpoint']})"]
