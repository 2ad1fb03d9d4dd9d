"""`t2t-keras export --format marian`: a translation run written as a Hugging Face OPUS-MT (Marian) checkpoint.

    export_marian_run("runs/demo", "exports/demo-marian")
    MarianMTModel.from_pretrained("exports/demo-marian")    # transformers: the run's logits (within 1e-4)
    MarianTokenizer.from_pretrained("exports/demo-marian")  # the run's ids

The directory holds what `from_pretrained` reads: config.json, model.safetensors (float32), generation_config.json
(the ids, the run's beam size, `bad_words_ids` the ids our searches never output), source.spm, target.spm,
vocab.json (+ target_vocab.json), tokenizer_config.json and special_tokens_map.json (`marian_vocabulary`). The
tensors are named by `weights.assignments`, the mapping `t2t-keras import --from marian` reads them with, so an
export imports back unchanged and an imported checkpoint exports back to its own tensors.

MarianMTModel is the paper's post-LN Transformer with fixed switches, and a run is written only where it computes
what the run computes. What the export does with each of our settings:

- §3.5's interleaved sinusoid (sin, cos, sin, cos, ...): MarianMTModel computes the same sinusoids with the sines
  first and the cosines after them, a fixed permutation P of the d_model dimension, and its config has no key for
  another layout. Every part of the model is equivariant under P: the LayerNorms (their mean and variance over
  the dimension do not change order), the residual sums, and every projection once its rows (out of the residual
  stream) or columns and bias (into it) are permuted. So the tensors are written permuted (`weights.tensors_of`):
  the embeddings' columns, LayerNorm scales and offsets and the projections along d_model; the tied output
  projection stays tied, since x P (E P)^T = x E^T. The import then makes a run with Marian's layout (`split`).
- pre-LN (`model.normalize_first`), learned positions, fairseq's sinusoid or a position offset, heads not d_model / h
  wide, the adaptive softmax, and a LayerNorm epsilon other than 1e-5 (MarianMTModel's torch.nn.LayerNorm default,
  not a config key; the residual stream's scale cannot absorb it, since the sinusoid added to the embeddings is
  fixed) have no MarianMTModel: refused, naming the setting.
- the embedding scale sqrt(d_model) (§3.4) is `scale_embedding`; relu, gelu and swish are its
  `activation_function`s; no final-logits bias is a zero `final_logits_bias`; one vocabulary shared three ways,
  a target embedding tied to the output, or no tying are `share_encoder_decoder_embeddings` and
  `tie_word_embeddings` (untied embeddings holding the same values, as an import of a checkpoint with one shared
  matrix and an output layer of its own gives, are written as that one matrix).
- the special ids go to config.json (pad_token_id, eos_token_id, decoder_start_token_id: our decoder starts from
  bos, 2) and must be the ids vocab.json gives MarianTokenizer's `<pad>`, `</s>` and `<unk>`.
"""

import json
import logging
import pathlib

import numpy as np

from t2t_keras.files import check_can_write, staged_directory
from t2t_keras.pretrained import marian
from t2t_keras.pretrained.checkpoint import CONFIG, SAFETENSORS, CheckpointError
from t2t_keras.pretrained.marian_vocabulary import (
    check_special_tokens,
    check_tokenizer_kind,
    marian_vocabulary,
    tokenizer_documents,
)
from t2t_keras.pretrained.settings import ACTIVATIONS, LAYER_NORM_EPSILON
from t2t_keras.pretrained.weights import tensors_of
from t2t_keras.runs import open_run, weights_to_export

logger = logging.getLogger(__name__)

LOGITS_BIAS = "final_logits_bias"
GENERATION_CONFIG = "generation_config.json"
FIX = "export it with --format saved_model, ctranslate2 or litert instead"


def _refusals(model):
    """`(refused, setting, why)` of each of the model's settings MarianMTModel may lack."""
    width = model.hidden_dim // model.num_heads
    return (
        (model.normalize_first, "model.normalize_first=true", "MarianMTModel normalises after each sublayer (post-LN, "
         "§3.1) and has no final LayerNorm per stack; its config.json has no key for pre-LN (MarianMTModel does not "
         "read normalize_before)"),
        (model.position_encoding != "sinusoidal", f"model.position_encoding={model.position_encoding}",
         "MarianMTModel adds fixed sinusoids (§3.5), not learned positions"),
        (model.position_sinusoid == "fairseq", "model.position_sinusoid=fairseq", "fairseq's sinusoid has other "
         "frequencies than MarianMTModel's, so no reordering of d_model turns one into the other"),
        (model.position_offset != 0, f"model.position_offset={model.position_offset}", "MarianMTModel's first "
         "position is 0"),
        (model.head_key_dim != width or model.head_value_dim != width, f"model.key_dim={model.key_dim}, "
         f"model.value_dim={model.value_dim}", f"MarianMTModel's heads are d_model / h = {width} wide"),
        (model.softmax != "full", f"model.softmax={model.softmax}", "MarianMTModel's output layer is a full softmax"),
        (model.layer_norm_epsilon != LAYER_NORM_EPSILON, f"model.layer_norm_epsilon={model.layer_norm_epsilon:g}",
         f"MarianMTModel's LayerNorms use epsilon {LAYER_NORM_EPSILON:g} (torch.nn.LayerNorm's default, not a config "
         "key), and no change of the weights makes one epsilon compute as another. A run trained with "
         f"--set model.layer_norm_epsilon={LAYER_NORM_EPSILON:g} exports; a trained run can be adapted: t2t-keras "
         f"train --init-from RUN --run-dir NEW --set model.layer_norm_epsilon={LAYER_NORM_EPSILON:g} (a few hundred "
         "updates), then export NEW"),
    )


def check_expressible(model):
    """Refuses, naming the first setting, a model section (`config.ModelConfig`) MarianMTModel cannot compute."""
    for refused, setting, why in _refusals(model):
        if refused:
            raise CheckpointError(f"--format marian cannot write this run: {setting}, and {why}. Fix: {FIX}.")


def residual_permutation(model):
    """The permutation of d_model that lays §3.5's interleaved sinusoid out as Marian's [sin..., cos...] (new
    column j is old column `permutation[j]`), or None where the run already has Marian's layout."""
    if model.position_sinusoid != "interleaved":
        return None
    return np.concatenate([np.arange(0, model.hidden_dim, 2), np.arange(1, model.hidden_dim, 2)])


def shares_embeddings(model):
    """Whether the source and target embeddings of a built `Transformer` are one matrix for MarianMTModel
    (`share_encoder_decoder_embeddings`): tied, or untied to the output layer and equal."""
    source, target = model.source_embedding, model.target_embedding
    return source is target or (model.output_projection is not None and
                                np.array_equal(source.embeddings.numpy(), target.embeddings.numpy()))


def marian_tensors(model, model_config):
    """`{name: float32 array}` of a built `Transformer`, named and laid out as MarianMTModel stores them."""
    vocab_size = model_config.vocab_size
    tensors = tensors_of(model, marian.embedding_names(shares_embeddings(model)), residual_permutation(model_config),
                         shapes={LOGITS_BIAS: (1, vocab_size)})
    if model.logits_bias is None:  # MarianMTModel always adds one
        tensors[LOGITS_BIAS] = np.zeros((1, vocab_size), np.float32)
    return tensors


def marian_config(model, shared):
    """config.json of a model section (`config.ModelConfig`) MarianMTModel expresses (`check_expressible`), its
    embeddings one matrix where `shared` (`shares_embeddings`)."""
    ids, heads, inner = model.special_ids, model.num_heads, model.intermediate_dim
    activation = {ours: theirs for theirs, ours in ACTIVATIONS.items() if theirs != "silu"}[model.activation]
    return {"architectures": ["MarianMTModel"], "model_type": "marian", "is_encoder_decoder": True,
            "vocab_size": model.source_vocab_size or model.vocab_size, "decoder_vocab_size": model.vocab_size,
            "d_model": model.hidden_dim,
            "encoder_layers": model.num_layers, "decoder_layers": model.decoder_layers,
            "encoder_attention_heads": heads, "decoder_attention_heads": heads,
            "encoder_ffn_dim": inner, "decoder_ffn_dim": inner, "activation_function": activation,
            "dropout": model.dropout, "attention_dropout": model.attention_dropout,
            "activation_dropout": model.activation_dropout, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
            "max_position_embeddings": model.max_length, "scale_embedding": model.scale_embeddings,
            "share_encoder_decoder_embeddings": shared,
            "tie_word_embeddings": model.tie_embeddings != "none", "pad_token_id": ids.pad, "eos_token_id": ids.eos,
            "forced_eos_token_id": ids.eos, "decoder_start_token_id": ids.decoder_start,
            "bos_token_id": None if ids.bos == ids.decoder_start else ids.bos, "init_std": 0.02, "use_cache": True,
            "dtype": "float32"}


def generation_config(model, request):
    """generation_config.json: the ids, the beam size of `request`, the run's length limit, and as bad words the
    ids our searches never output (the pad and the decoder's start)."""
    ids = model.special_ids
    return {"decoder_start_token_id": ids.decoder_start, "pad_token_id": ids.pad, "eos_token_id": ids.eos,
            "forced_eos_token_id": ids.eos, "bad_words_ids": [[i] for i in sorted({ids.pad, ids.decoder_start})],
            "num_beams": request.beam_size, "max_length": model.max_length}


def export_marian_run(run_dir, out_dir, request, average_last=None, source="auto", overwrite=False):
    """Writes the run at `run_dir` as a Marian checkpoint directory `out_dir`, atomically; returns `out_dir`.

    `request` (a `GenerationRequest`) gives generation_config.json's beam size; `average_last` and `source` choose
    the weights (`runs.weights_to_export`); `overwrite` replaces an existing `out_dir`. Everything is checked before
    anything is written: a CheckpointError names a setting MarianMTModel or MarianTokenizer cannot express.
    """
    run, out_dir = open_run(run_dir), pathlib.Path(out_dir)
    config = run.load_config()
    check_expressible(config.model)
    check_tokenizer_kind(config.data.tokenizer)
    vocabulary = marian_vocabulary(run.load_tokenizer(), config.data.tokenizer)
    check_special_tokens(vocabulary, config.model.special_ids)
    check_can_write(out_dir, overwrite)
    model, _ = weights_to_export(run, source, average_last)
    tensors = marian_tensors(model, config.model)
    documents = {CONFIG: marian_config(config.model, shares_embeddings(model)),
                 GENERATION_CONFIG: generation_config(config.model, request),
                 **tokenizer_documents(vocabulary, config.model.max_length)}
    with staged_directory(out_dir, overwrite) as staging:
        _save_safetensors(tensors, staging / SAFETENSORS)
        for name, data in vocabulary.files.items():
            (staging / name).write_bytes(data)
        for name, document in documents.items():
            (staging / name).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    logger.info("Exported %s as a Marian checkpoint to %s.", run.path, out_dir)
    return out_dir


def _save_safetensors(tensors, path):
    """The tensors as safetensors, with the metadata transformers requires of a PyTorch checkpoint."""
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})
