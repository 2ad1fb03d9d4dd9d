# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A pretrained model: import, translate, inspect, fine-tune, export, serve
#
# An OPUS-MT checkpoint (Hugging Face's `MarianMTModel`) is the paper's Transformer with a few switches
# thrown. This notebook imports one as a run directory, checks it against transformers, translates, writes
# its attention heads for TensorBoard, fine-tunes it with `model.fit` on a small parallel corpus, exports the
# fine-tuned run as a SavedModel, asks the REST server for a translation, and writes the run back in
# Hugging Face's layout. [docs/pretrained.md](../docs/pretrained.md) explains each step.

# %% [markdown]
# ## Parameters
#
# | variable | default | meaning |
# |---|---|---|
# | `T2T_NOTEBOOK_CHECKPOINT` | (none) | a downloaded OPUS-MT directory; none: a tiny one made here with transformers |
# | `T2T_NOTEBOOK_T5_CHECKPOINT` | (none) | a downloaded MADLAD-400 directory; none: a tiny MADLAD-shaped one made here |
# | `T2T_NOTEBOOK_WORK_DIR` | `runs/pretrained-notebook` | the runs and exports (replaced) |
# | `T2T_NOTEBOOK_TRAIN_FILES` | (none) | `source;target` files to fine-tune on; none: a toy corpus written here |
# | `T2T_NOTEBOOK_STEPS` | `20` | fine-tuning updates |
#
# A real checkpoint comes from the Hub (`huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir
# ckpt/opus-mt-en-de`). Without one the notebook makes a stand-in: random weights, d_model 32, two layers
# each side, so that every cell runs in seconds; its translations are noise.

# %%
import os
import pathlib
import shutil

CHECKPOINT = os.environ.get("T2T_NOTEBOOK_CHECKPOINT")
WORK_DIR = pathlib.Path(os.environ.get("T2T_NOTEBOOK_WORK_DIR", "runs/pretrained-notebook"))
TRAIN_FILES = [name for name in os.environ.get("T2T_NOTEBOOK_TRAIN_FILES", "").split(";") if name]
STEPS = int(os.environ.get("T2T_NOTEBOOK_STEPS", "20"))
shutil.rmtree(WORK_DIR, ignore_errors=True)
WORK_DIR.mkdir(parents=True)

# %% [markdown]
# ## A checkpoint
#
# The toy corpus translates English words one by one into German ones. The stand-in checkpoint's
# SentencePiece model is learned on it, and its `vocab.json` numbers the pieces as OPUS-MT's do: `</s>` 0,
# `<unk>` 1, the pieces, and `<pad>` last, which is also where the decoder starts.

# %%
import json

import numpy as np

ENGLISH = "the cat dog house tree sees big small red green runs sleeps under near a man woman eats".split()
GERMAN = "die Katze Hund Haus Baum sieht gross klein rot gruen rennt schlaeft unter nahe ein Mann Frau isst".split()
rng = np.random.default_rng(0)
words = [rng.integers(0, len(ENGLISH), size=rng.integers(3, 8)) for _ in range(200)]
pairs = [(" ".join(ENGLISH[i] for i in row), " ".join(GERMAN[i] for i in row)) for row in words]
if not TRAIN_FILES:
    TRAIN_FILES = [str(WORK_DIR / "train.en"), str(WORK_DIR / "train.de")]
    for path, side in zip(TRAIN_FILES, zip(*pairs)):
        pathlib.Path(path).write_text("\n".join(side) + "\n", encoding="utf-8")


def tiny_opus_mt(directory, lines):
    """An OPUS-MT-shaped checkpoint with random weights, written by transformers as a download holds it."""
    import sentencepiece as spm
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    directory.mkdir(parents=True)
    prefix = str(directory.parent / "spm")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=60, minloglevel=2)
    pieces = spm.SentencePieceProcessor(model_file=prefix + ".model")
    vocabulary = {"</s>": 0, "<unk>": 1}
    for piece in map(pieces.id_to_piece, range(pieces.get_piece_size())):
        vocabulary.setdefault(piece, len(vocabulary))
    pad = vocabulary.setdefault("<pad>", len(vocabulary))
    (directory.parent / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    MarianTokenizer(prefix + ".model", prefix + ".model", str(directory.parent / "vocab.json")).save_pretrained(
        directory)
    config = MarianConfig(vocab_size=len(vocabulary), decoder_vocab_size=len(vocabulary), d_model=32,
                          encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                          activation_function="swish", scale_embedding=True, pad_token_id=pad, eos_token_id=0,
                          decoder_start_token_id=pad, forced_eos_token_id=0)
    model, generator = MarianMTModel(config), torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights drawn wider than transformers' initialisation, so that the heads differ
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    model.save_pretrained(directory)
    GenerationConfig(num_beams=2, max_length=128, decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=0,
                     forced_eos_token_id=0, bad_words_ids=[[pad]]).save_pretrained(directory)
    return directory


if CHECKPOINT is None:
    CHECKPOINT = tiny_opus_mt(WORK_DIR / "checkpoint" / "opus-mt-tiny", [line for pair in pairs for line in pair])
CHECKPOINT = pathlib.Path(CHECKPOINT)
print(sorted(path.name for path in CHECKPOINT.iterdir()))

# %% [markdown]
# ## Import
#
# `import_checkpoint` (what `t2t-keras import --from marian` runs) reads `config.json`, the weights and the
# tokenizer files, and writes a run: the model section with the switches the checkpoint needs (Marian's
# split sinusoid, swish, LayerNorm epsilon 1e-5, the logits bias, its own special ids), the tokenizer as
# `tokenizer.zip` and the weights as a checkpoint at step 0.

# %%
from t2t_keras.pretrained.importer import import_checkpoint
from t2t_keras.runs import load_run_model

run = import_checkpoint("marian", CHECKPOINT, WORK_DIR / "imported")
config = run.load_config()
model, tokenizer = load_run_model(run), run.load_tokenizer()
for key in ("hidden_dim", "activation", "scale_embeddings", "position_sinusoid", "layer_norm_epsilon",
            "final_logits_bias", "special_ids"):
    print(f"{key:>20}: {getattr(config.model, key)}")

# %% [markdown]
# The run's model computes transformers' logits, and its tokenizer gives transformers' ids: the source
# pieces and `</s>`; the decoder reads the pad id first, then the target's pieces.

# %%
import torch
from transformers import MarianMTModel, MarianTokenizer

ids = config.model.special_ids
sentences = [source for source, _ in pairs[:3]]
source = tokenizer.tokenize(sentences).to_tensor(default_value=ids.pad).numpy()
target_in = np.concatenate([np.full((len(source), 1), ids.decoder_start), source[:, :-1]], axis=1)
ours = np.asarray(model((source, target_in)))
with torch.no_grad():
    theirs = MarianMTModel.from_pretrained(CHECKPOINT).eval()(
        input_ids=torch.tensor(source, dtype=torch.long), attention_mask=torch.tensor(source != ids.pad),
        decoder_input_ids=torch.tensor(target_in, dtype=torch.long)).logits.numpy()
logits_difference = float(np.max(np.abs(ours - theirs)))
their_ids = MarianTokenizer.from_pretrained(CHECKPOINT)(sentences)["input_ids"]
same_ids = tokenizer.tokenize(sentences).to_list() == their_ids
print(f"max |logit difference| {logits_difference:.2e}; same token ids: {same_ids}")

# %% [markdown]
# ## Translate
#
# The run is an artifact like any other: `open_artifact(run).generate` searches with the run's defaults, or
# with a request of our own (greedy here).

# %%
from t2t_keras.artifacts import open_artifact

imported = open_artifact(run)
for source_text, translation in zip(sentences, imported.generate(sentences, imported.request(beam_size=1)).best):
    print(f"{source_text}\n  → {translation}")

# %% [markdown]
# ## A T5-family checkpoint beside it
#
# `import --from t5` takes T5, Flan-T5, mT5 and MADLAD-400 (`T5ForConditionalGeneration`,
# `MT5ForConditionalGeneration`). T5 throws more switches than Marian: a learned relative position bias in
# the self-attention instead of added sinusoids, RMS normalisation before each sublayer, a gated feed-forward,
# no biases, no 1/√d_k. MADLAD-400 translates into the language whose tag starts the source: `target_lang="de"`
# (`--target-lang de`) writes `<2de>` first. Set `T2T_NOTEBOOK_T5_CHECKPOINT` to a downloaded directory
# (`huggingface-cli download google/madlad400-3b-mt --local-dir ckpt/madlad-3b`: 12 GB in float32); without it a
# MADLAD-shaped stand-in is made here with transformers, d_model 32.

# %%
T5_CHECKPOINT = os.environ.get("T2T_NOTEBOOK_T5_CHECKPOINT")


def tiny_madlad(directory, lines):
    """A MADLAD-400-shaped checkpoint: gated GELU, target tags <2xx> as SentencePiece user symbols, spiece.model
    beside the tokenizer.json transformers writes, saved by transformers 5 (which writes the projection tied to
    the embedding, with `scale_decoder_outputs: false`)."""
    import sentencepiece as spm
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration, T5Tokenizer

    directory.mkdir(parents=True)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(directory / "spiece"),
                                   vocab_size=60, minloglevel=2, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   user_defined_symbols="<2de>,<2en>")
    (directory / "spiece.vocab").unlink()
    T5Tokenizer.from_pretrained(str(directory), extra_ids=4).save_pretrained(directory)
    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0)
    model, generator = T5ForConditionalGeneration(config), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2 + ("layer_norm" in name))
    model.save_pretrained(directory)
    GenerationConfig(decoder_start_token_id=0, pad_token_id=0, eos_token_id=1).save_pretrained(directory)
    return directory


if T5_CHECKPOINT is None:
    T5_CHECKPOINT = tiny_madlad(WORK_DIR / "checkpoint" / "madlad-tiny", [line for pair in pairs for line in pair])
t5_run = import_checkpoint("t5", T5_CHECKPOINT, WORK_DIR / "imported-t5", target_lang="de")
t5_config = t5_run.load_config()
for key in ("position_encoding", "relative_buckets", "normalization", "gated_feed_forward", "activation",
            "use_bias", "scale_attention", "tie_embeddings", "special_ids"):
    print(f"{key:>20}: {getattr(t5_config.model, key)}")

# %% [markdown]
# Its logits are transformers' on the same ids (the source starts with `<2de>`), and the run translates as any
# other.

# %%
from transformers import AutoModelForSeq2SeqLM

t5_ids = t5_config.model.special_ids
t5_source = t5_run.load_tokenizer().tokenize(sentences).to_tensor(default_value=t5_ids.pad).numpy()
t5_target_in = np.concatenate([np.full((len(t5_source), 1), t5_ids.decoder_start), t5_source[:, 1:-1]], axis=1)
with torch.no_grad():
    t5_theirs = AutoModelForSeq2SeqLM.from_pretrained(T5_CHECKPOINT).eval()(
        input_ids=torch.tensor(t5_source, dtype=torch.long), attention_mask=torch.tensor(t5_source != t5_ids.pad),
        decoder_input_ids=torch.tensor(t5_target_in, dtype=torch.long)).logits.numpy()
t5_logits_difference = float(np.max(np.abs(np.asarray(load_run_model(t5_run)((t5_source, t5_target_in)))
                                            - t5_theirs)))
print(f"max |logit difference| {t5_logits_difference:.2e}")
t5_imported = open_artifact(t5_run)
print(t5_imported.generate(sentences, t5_imported.request(beam_size=1)).best)

# %% [markdown]
# ## The heads, for TensorBoard
#
# `write_attention_summaries` translates probe sentences, runs the model over its own translations and writes,
# per attention kind (§3.2.3) and layer, a grid of per-head heatmaps and the heads' mean entropy, what the
# training runs' `AttentionSummary` writes (`tensorboard --logdir WORK_DIR/logs`).

# %%
import tensorflow as tf

from t2t_keras.inspect.summary import write_attention_summaries

writer = tf.summary.create_file_writer(str(WORK_DIR / "logs" / "attention"))
scalars = write_attention_summaries(model, tokenizer, sentences[:1], writer, step=0, max_extra_length=6)
for tag in sorted(tag for tag in scalars if tag.startswith("attention_entropy")):
    print(f"{tag:>40}: {scalars[tag]:.3f} nats")
attention_events = sorted(path.name for path in (WORK_DIR / "logs" / "attention").iterdir())
print(attention_events)

# %% [markdown]
# ## Fine-tuning with `model.fit`
#
# The training batches frame each pair with the model's own ids (`t2t_keras/data/framing.py`): the source's
# pieces and its eos, the decoder's input from the decoder start, the labels ending with the eos, padding
# with the pad id, which weighs 0 in the loss. One pair of the first batch:

# %%
from t2t_keras.data.batching import make_training_dataset
from t2t_keras.data.sources import as_dataset

batch = next(iter(make_training_dataset(as_dataset(pairs), tokenizer, max_length=64, batch_tokens=256,
                                        shuffle_buffer=1, seed=0, special_ids=ids, count_dropped=False)))
(batch_source, batch_target_in), batch_target_out, batch_weights = batch
rows = {"source": batch_source, "target_in": batch_target_in, "target_out": batch_target_out, "weights": batch_weights}
for name, rows_of_batch in rows.items():
    print(f"{name:>10}: {rows_of_batch.numpy()[0].tolist()}")

# %% [markdown]
# `train` of a run resolved with `init_from` (what `t2t-keras train --init-from` runs) starts a new run from the
# imported one: its model, vocabulary and ids, a fresh optimizer, here a constant learning rate, and `model.fit`
# for `STEPS` updates. `training.lora_rank` would train low-rank adapters instead, every other weight frozen.

# %%
from t2t_keras.config import load_config
from t2t_keras.resolved_run import InitSource, resolve_run
from t2t_keras.training.trainer import train

settings = {"data.source": "text", "data.train_files": TRAIN_FILES, "data.max_length": 64, "data.batch_tokens": 512,
            "training.train_steps": STEPS, "training.steps_per_epoch": STEPS, "training.checkpoint_every_steps": STEPS,
            "training.learning_rate": 0.003, "training.jit_compile": False}
fine_tuning = load_config("tiny", [f"{key}={value!r}" if isinstance(value, list) else f"{key}={value}"
                                   for key, value in settings.items()])
from t2t_keras.training.loss import LabelSmoothedCrossEntropy

result = train(resolve_run(WORK_DIR / "fine-tuned", fine_tuning, init_from=InitSource(run)), verbose=2)
fine_tuned = load_run_model(WORK_DIR / "fine-tuned")


def batch_loss(some_model):
    """The cross-entropy of `some_model` on the batch above, padding left out."""
    logits = some_model((batch_source, batch_target_in))
    return float(LabelSmoothedCrossEntropy(epsilon=0.0, pad_id=ids.pad)(batch_target_out, logits, batch_weights))


losses = {"imported": batch_loss(model), "fine-tuned": batch_loss(fine_tuned)}
print(f"steps {result.start_step} -> {result.final_step}; loss on the batch above: {losses}")

# %% [markdown]
# ## Export and serve
#
# The fine-tuned run exports as any run does: a SavedModel with the tokenizer and the searches in its graph.

# %%
from t2t_keras.export.formats import export_format

EXPORT_DIR = export_format(WORK_DIR / "fine-tuned", WORK_DIR / "export", "saved_model", beam_size=1,
                           max_beam_size=1)
exported = open_artifact(EXPORT_DIR)
in_process = exported.generate(sentences, exported.request()).best
print(in_process)

# %% [markdown]
# `serve` answers TensorFlow Serving's REST API (notebook 03 shows more of it); here one request, and the
# server stops again.

# %%
import socket
import subprocess
import sys
import time
import urllib.request

SERVE = "import sys; from t2t_keras.serving.server import serve; serve(sys.argv[1], port=int(sys.argv[2]))"
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    PORT = probe.getsockname()[1]
server_log = WORK_DIR / "serve.log"
with open(server_log, "wb") as log:
    server = subprocess.Popen([sys.executable, "-c", SERVE, str(EXPORT_DIR), str(PORT)], stdout=log,
                              stderr=subprocess.STDOUT)


def post(path, payload):
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=json.dumps(payload).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return response.status, json.load(response)


deadline = time.monotonic() + 300
while True:  # /healthz answers 200 once the export is loaded
    if server.poll() is not None:
        raise RuntimeError(f"the server exited with {server.returncode}:\n{server_log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=5) as response:
            if response.status == 200:
                break
    except OSError:
        if time.monotonic() > deadline:
            raise
    time.sleep(0.5)
status, answer = post("/v1/models/default:predict", {"instances": sentences})
rest = [prediction["translations"] for prediction in answer["predictions"]]
print("HTTP", status, rest, "| same as in process:", rest == in_process)
server.terminate()
server.wait(timeout=60)
print("server exit code:", server.returncode)

# %% [markdown]
# ## Back to Hugging Face's layout
#
# `export --format marian` writes the fine-tuned run as an OPUS-MT checkpoint again, through the mapping the
# import read it with: transformers loads it and computes the fine-tuned run's logits.

# %%
MARIAN_DIR = export_format(WORK_DIR / "fine-tuned", WORK_DIR / "marian", "marian")
with torch.no_grad():
    again = MarianMTModel.from_pretrained(MARIAN_DIR).eval()(
        input_ids=torch.tensor(source, dtype=torch.long), attention_mask=torch.tensor(source != ids.pad),
        decoder_input_ids=torch.tensor(target_in, dtype=torch.long)).logits.numpy()
round_trip_difference = float(np.max(np.abs(np.asarray(fine_tuned((source, target_in))) - again)))
print(sorted(path.name for path in MARIAN_DIR.iterdir()))
print(f"max |logit difference| {round_trip_difference:.2e}")
