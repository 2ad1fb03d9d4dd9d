"""Small T5-family checkpoints in the real layout, made with transformers itself (nothing downloaded).

A T5 SentencePiece model (`spiece.model`: <pad> 0, </s> 1, <unk> 2, sentinels after the pieces) trained here,
the tokenizer.json that transformers' `T5Tokenizer` writes beside it, random weights, and the config.json and
weights as the released files hold them: T5 v1.0 (ReLU, the projection tied to the embedding, scaled decoder
output), v1.1 / mT5 (gated GELU, `lm_head.weight` apart, as transformers 4 wrote them), and MADLAD-400 (an mT5
with target-language tags `<2xx>` as SentencePiece user symbols, `decoder.embed_tokens.weight` stored beside
`shared.weight`, decoding started from id 0).
"""

import json
import pathlib
import shutil

import numpy as np

from tests.hf_checkpoints import sentences, train_sentencepiece

MADLAD_TAGS = ["<2de>", "<2en>", "<2fr>"]
EXTRA_IDS = 3
TINY = dict(d_model=16, d_kv=8, d_ff=24, num_layers=2, num_decoder_layers=2, num_heads=3,
            relative_attention_num_buckets=8, relative_attention_max_distance=20)


def _tokenizer(directory, work, tags, seed):
    from transformers import T5Tokenizer

    lines = sentences(300, seed=seed + 3, tags=tags)
    symbols = {"user_defined_symbols": ",".join(tags)} if tags else {}
    model = train_sentencepiece(work / "spiece.model", lines, 80, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                **symbols)
    tokenizer = T5Tokenizer.from_pretrained(str(work), extra_ids=EXTRA_IDS)
    tokenizer.save_pretrained(directory)
    shutil.copy(model, directory / "spiece.model")
    return tokenizer


def _weights(model, seed):
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            scale = 0.2 if "layer_norm" not in name else 0.5
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale
                            + (1.0 if "layer_norm" in name else 0.0))
    return model


def _model(model_type, **options):
    """A `T5ForConditionalGeneration` (model_type t5, mt5) or `UMT5ForConditionalGeneration` (umt5) of `options`."""
    from transformers import T5Config, T5ForConditionalGeneration, UMT5Config, UMT5ForConditionalGeneration

    if model_type == "umt5":
        return UMT5ForConditionalGeneration(UMT5Config(**options))
    return T5ForConditionalGeneration(T5Config(**options))


def t5_checkpoint(directory, kind="v1.1", seed=0, model_type="t5", sizes=TINY, vocab_size=None, dtype=None,
                  shard_bytes=None):
    """A checkpoint of `kind`: "v1.0" (tied, ReLU), "v1.1" (untied, gated GELU), "madlad" (v1.1 with language tags,
    decoder.embed_tokens apart, decoder start 0), "transformers5" (v1.1 as transformers 5 saves it: its config.json
    and `shared.weight` alone); `model_type` "t5", "mt5" or "umt5" (v1.1 as google/umt5-* hold it, or
    transformers5); `sizes` of T5Config; `vocab_size`
    (default: the tokenizer's ids and 5 more, as T5's 32,128 exceed its 32,100 tokens); `dtype`: the torch dtype of
    the stored tensors (torch.bfloat16 as the released MADLAD-400 files); `shard_bytes`: shards of at most that many
    bytes and their `model.safetensors.index.json`, as `save_pretrained(max_shard_size=...)` writes them."""
    import torch

    directory = pathlib.Path(directory)
    work = directory.parent / f"{directory.name}-work"
    work.mkdir(parents=True)
    directory.mkdir(parents=True)
    tokenizer = _tokenizer(directory, work, MADLAD_TAGS if kind == "madlad" else (), seed)
    tied = kind == "v1.0"
    model = _weights(_model(model_type, vocab_size=vocab_size or len(tokenizer) + 5, decoder_start_token_id=0,
                            feed_forward_proj="relu" if tied else "gated-gelu", pad_token_id=0, eos_token_id=1,
                            dropout_rate=0.1, **sizes), seed)
    if kind == "transformers5":
        model.save_pretrained(directory)
        return directory
    config = model.config
    state = {name: value.detach().clone().contiguous() for name, value in model.state_dict().items()
             if "embed_tokens" not in name and name != "lm_head.weight"}
    del model
    if not tied:  # lm_head apart, as transformers 4 saved an untied model
        generator = torch.Generator().manual_seed(seed + 1)
        state["lm_head.weight"] = torch.randn(state["shared.weight"].shape, generator=generator) * 0.2
    if kind == "madlad":  # MADLAD's files hold the stacks' embeddings beside shared.weight
        for stack in ("encoder", "decoder"):
            state[f"{stack}.embed_tokens.weight"] = state["shared.weight"].clone()
    _save(state if dtype is None else {name: value.to(dtype) for name, value in state.items()}, directory,
          shard_bytes)
    _write_config(directory, config, model_type, tied, dtype or torch.float32)
    generation = {"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}
    (directory / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return directory


def _write_config(directory, config, model_type, tied, dtype):
    """config.json as transformers 4 wrote the released files: `tie_word_embeddings` false when untied, no
    `scale_decoder_outputs`; umT5's with the `scalable_attention: true` of google/umt5-* (its per-layer tables)."""
    document = json.loads(config.to_json_string())
    document.pop("scale_decoder_outputs", None)
    architecture = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration",
                    "umt5": "UMT5ForConditionalGeneration"}[model_type]
    document.update(architectures=[architecture], model_type=model_type, tie_word_embeddings=tied,
                    transformers_version="4.40.0", torch_dtype=str(dtype).replace("torch.", ""))
    if model_type == "umt5":
        document.update(scalable_attention=True, tokenizer_class="T5Tokenizer")
    (directory / "config.json").write_text(json.dumps(document, indent=2), encoding="utf-8")


def _save(state, directory, shard_bytes=None):
    """`model.safetensors`, or shards `model-0000N-of-0000M.safetensors` of at most `shard_bytes` (a tensor larger
    than that alone in one) named by `model.safetensors.index.json`, in the state's order."""
    from safetensors.torch import save_file

    if shard_bytes is None:
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
        return
    groups, size = [[]], 0
    for name, value in state.items():
        nbytes = value.numel() * value.element_size()
        if groups[-1] and size + nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    weight_map = {}
    for index, names in enumerate(groups):
        shard = f"model-{index + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({name: state[name] for name in names}, str(directory / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, shard))
    total = sum(value.numel() * value.element_size() for value in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def reference_model(directory, dtype=None):
    """transformers' own model of the checkpoint for inference, in `dtype` (a torch dtype; float32 by default).

    umT5: transformers 5.23's UMT5Config sets `tie_word_embeddings` true whatever config.json says, and its model
    scales the decoder output by d_model^-0.5 whenever that is true; the released files' config.json says false
    (`lm_head` apart, no scale: how transformers 4 ran them), which the model is given back here."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(str(directory), dtype=dtype or torch.float32).eval()
    written = json.loads((pathlib.Path(directory) / "config.json").read_text(encoding="utf-8"))
    if written["model_type"] == "umt5" and written.get("tie_word_embeddings") is False:
        model.config.tie_word_embeddings = False
    return model


def reference_tokenizer(directory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def inputs(config, seed=0):
    """A source batch (its second row right-padded) and decoder inputs starting with the decoder start id."""
    ids = config.model.special_ids
    rng = np.random.default_rng(seed)
    source = rng.integers(3, config.model.vocab_size, size=(2, 9))
    source[:, -1] = ids.eos
    source[1, 5:] = ids.pad
    source[1, 4] = ids.eos
    target_in = rng.integers(3, config.model.vocab_size, size=(2, 6))
    target_in[:, 0] = ids.decoder_start
    return source.astype(np.int32), target_in.astype(np.int32)
