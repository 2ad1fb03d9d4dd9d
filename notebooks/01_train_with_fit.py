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
# # Training a Transformer with `model.fit`
#
# This notebook trains the Transformer of *Attention Is All You Need* (Vaswani et al., 2017) on the
# default corpus, the English→German LibreOffice help, one piece at a time: the data pipeline (§5.1),
# the model (§3), the learning-rate schedule and Adam (§5.3), label smoothing (§5.4), then a plain
# `model.fit` with TensorBoard, checkpoint and attention callbacks, learning curves and a few
# translations. `t2t-keras train` (`t2t_keras.training.trainer.train`) runs the same steps, plus
# distribution strategies.
#
# The run directory it writes (config, tokenizer, checkpoints, logs) is what notebooks 02 (attention)
# and 03 (export and serving) read.

# %% [markdown]
# ## Parameters
#
# Environment variables choose the budget, so the same notebook serves a real run and a quick check:
#
# | variable | default | meaning |
# |---|---|---|
# | `T2T_NOTEBOOK_CONFIG` | `small` | preset (`configs/NAME.yaml`) or YAML file |
# | `T2T_NOTEBOOK_STEPS` | `4000` | optimizer updates in total (a rerun continues up to this) |
# | `T2T_NOTEBOOK_RUN_DIR` | `runs/notebook` | run directory, created if needed |
# | `T2T_NOTEBOOK_SENTENCES` | `8` | dev sentences translated at the end |
# | `T2T_NOTEBOOK_SET` | (none) | extra overrides, `;`-separated `section.key=value` |
#
# `small` takes about 1.3 s a step on 2 CPU cores: the default budget is 1.5 hours. The test suite
# runs this notebook with `tiny`, 30 steps and no XLA.

# %%
import os

CONFIG = os.environ.get("T2T_NOTEBOOK_CONFIG", "small")
STEPS = int(os.environ.get("T2T_NOTEBOOK_STEPS", "4000"))
RUN_DIR = os.environ.get("T2T_NOTEBOOK_RUN_DIR", "runs/notebook")
SENTENCES = int(os.environ.get("T2T_NOTEBOOK_SENTENCES", "8"))
OVERRIDES = [item.strip() for item in os.environ.get("T2T_NOTEBOOK_SET", "").split(";") if item.strip()]

# %%
import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

from t2t_keras.config import load_config, replace

config = load_config(CONFIG, [f"training.train_steps={STEPS}", *OVERRIDES])
t = config.training
# A short run should still see the peak of eq. (3) and some of its decay.
config = replace(config, training={
    "warmup_steps": min(t.warmup_steps, max(1, STEPS // 4)),
    "steps_per_epoch": min(t.steps_per_epoch, STEPS),
    "checkpoint_every_steps": min(t.checkpoint_every_steps, STEPS),
})
keras.utils.set_random_seed(config.training.seed)
print(config.model)
print(config.training)

# %% [markdown]
# ## The corpus
#
# The LibreOffice help is written in English and translated paragraph by paragraph. The first call
# downloads two Debian packages (`apt-get download`, no installation), pairs paragraphs with the same
# id and splits by help page; later calls read the cache (`~/.cache/t2t_keras`).

# %%
from t2t_keras.data.libreoffice import prepare_libreoffice_corpus
from t2t_keras.data.text_files import read_parallel_files

if config.data.source != "libreoffice":
    raise ValueError(f"This notebook reads the default corpus; data.source={config.data.source!r} is trained "
                     "by `t2t-keras train` (t2t_keras.training.trainer.train).")
corpus = prepare_libreoffice_corpus(config.data.target_lang)
train_pairs = read_parallel_files(*corpus.files("train"))
dev_pairs = read_parallel_files(*corpus.files("dev"))
print(f"{len(train_pairs)} training pairs, {len(dev_pairs)} dev pairs")
for source, target in train_pairs[100:103]:
    print(f"  {source}\n  → {target}\n")

# %% [markdown]
# ## The run directory and the shared vocabulary
#
# Source and target share one BPE vocabulary (§5.1), trained with SentencePiece on both sides of the
# training split. The tokenizer runs inside the TensorFlow graph (TF-Text), so the same file serves
# the input pipeline and, later, the exported model.

# %%
from t2t_keras.data.sources import sentences_for_vocabulary
from t2t_keras.data.tokenizer import Tokenizer, train_sentencepiece
from t2t_keras.training.run_directory import RunDirectory

run = RunDirectory(RUN_DIR)
config = run.resolve_config(config)  # writes RUN/config.yaml; a rerun checks model and data did not change
if run.tokenizer_path.exists():
    tokenizer = Tokenizer.load(run.tokenizer_path)
else:
    tokenizer = train_sentencepiece(sentences_for_vocabulary(train_pairs), run.tokenizer_path,
                                    config.data.vocab_size, seed=config.training.seed)
example = dev_pairs[0][0]
ids = tokenizer.tokenize(tf.constant([example]))[0].numpy()
print(example)
print([piece.decode() for piece in tokenizer.id_to_piece(ids).numpy()])

# %% [markdown]
# ## Batches of similar length
#
# "Sentence pairs were batched together by approximate sequence length" (§5.1). Pairs go into length
# buckets, and each bucket's batch size keeps about `data.batch_tokens` tokens per side. A batch is
# `((source, target_in), target_out, sample_weight)`: the decoder reads `<s> y1 … yn` and predicts
# `y1 … yn </s>`; the weight is 0 on padding.

# %%
from t2t_keras.data.batching import make_eval_dataset, make_training_dataset
from t2t_keras.data.sources import as_dataset

d = config.data
train_data = make_training_dataset(as_dataset(train_pairs), tokenizer, max_length=d.max_length,
                                   batch_tokens=d.batch_tokens, shuffle_buffer=d.shuffle_buffer,
                                   seed=config.training.seed).repeat()
dev_data = make_eval_dataset(as_dataset(dev_pairs), tokenizer, max_length=d.max_length,
                             batch_tokens=d.batch_tokens).cache()
dev_steps = sum(1 for _ in dev_data)  # one pass fills the cache
(source, target_in), target_out, weight = next(iter(train_data))
print("source", source.shape, "target_in", target_in.shape, "target_out", target_out.shape)
print("target_in[0] ", target_in[0].numpy())
print("target_out[0]", target_out[0].numpy())

# %% [markdown]
# ## The model
#
# `build_transformer` maps the config onto `Transformer(keras.Model)`: an encoder and a decoder stack
# of `num_layers` blocks, `num_heads` heads, `hidden_dim` = d_model, `intermediate_dim` = d_ff, and one
# embedding matrix shared by source, target and the pre-softmax projection (§3.4).

# %%
from t2t_keras.model import build_transformer

model = build_transformer(config.model)
model.build()
print(f"{model.count_params():,} parameters")

# %% [markdown]
# ## Optimizer, schedule and loss
#
# Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 on the schedule of eq. (3):
# `lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)`, and cross-entropy against targets
# smoothed with ε_ls = 0.1. The metrics ignore padding.

# %%
from t2t_keras.training.loss import LabelSmoothedCrossEntropy
from t2t_keras.training.metrics import MaskedAccuracy, Perplexity, TokenCount
from t2t_keras.training.schedule import TransformerSchedule

t = config.training
schedule = TransformerSchedule(config.model.hidden_dim, warmup_steps=t.warmup_steps, scale=t.learning_rate_scale)
optimizer = keras.optimizers.Adam(schedule, beta_1=t.adam_beta_1, beta_2=t.adam_beta_2, epsilon=t.adam_epsilon)
model.compile(
    optimizer=optimizer,
    loss=LabelSmoothedCrossEntropy(epsilon=t.label_smoothing),
    metrics=[MaskedAccuracy(), Perplexity(), TokenCount()],
    jit_compile=t.jit_compile,
)

steps = np.arange(0, max(STEPS, 2 * t.warmup_steps))
plt.figure(figsize=(6, 2.5))
plt.plot(steps + 1, schedule(steps).numpy())
plt.axvline(t.warmup_steps, color="gray", linestyle=":")
plt.xlabel("step")
plt.ylabel("learning rate")
plt.title("eq. (3)")
plt.show()

# %% [markdown]
# ## Callbacks
#
# * `PeriodicCheckpoint` saves model and optimizer (step, Adam moments, schedule position) as
#   `tf.train` checkpoints in `RUN/checkpoints`; a rerun of this notebook resumes from the newest.
# * `keras.callbacks.TensorBoard` writes the epoch curves to `RUN/logs`
#   (`tensorboard --logdir RUN/logs`).
# * `AttentionSummary` translates a few dev sentences now and then and writes per-head attention
#   heatmaps and statistics to `RUN/logs/attention`.
# * `StopAtStep` stops at exactly `train_steps` updates, also when resuming mid-epoch.

# %%
from t2t_keras.inspect.summary import AttentionSummary
from t2t_keras.training.callbacks import StopAtStep
from t2t_keras.training.checkpoints import CheckpointManager, PeriodicCheckpoint

manager = CheckpointManager(run.checkpoint_dir, model, optimizer, keep=t.keep_checkpoints)
start = manager.restore_latest()
probes = [source for source, _ in dev_pairs[:t.attention_probes]]
callbacks = [
    StopAtStep(t.train_steps),
    PeriodicCheckpoint(manager, t.checkpoint_every_steps, t.checkpoint_every_minutes),
    keras.callbacks.TensorBoard(str(run.log_dir), write_graph=False),
    AttentionSummary(tokenizer, probes, run.log_dir / "attention",
                     every_steps=t.attention_every_steps or t.train_steps, write_on_train_end=True),
]
print(f"starting at step {start} of {t.train_steps}")

# %% [markdown]
# ## Training
#
# One Keras epoch is `steps_per_epoch` updates followed by one pass over the dev set.

# %%
history = {}
if start < t.train_steps:
    history = model.fit(
        train_data,
        epochs=-(-t.train_steps // t.steps_per_epoch),
        initial_epoch=start // t.steps_per_epoch,
        steps_per_epoch=t.steps_per_epoch,
        validation_data=dev_data.repeat(),
        validation_steps=dev_steps,
        callbacks=callbacks,
        verbose=2,
    ).history
print(f"step {manager.step}; checkpoints: {[os.path.basename(p) for p in manager.manager.checkpoints]}")

# %% [markdown]
# ## Learning curves
#
# Training values are means over each epoch (with dropout), validation values are measured after
# it. Label smoothing keeps the loss above the model's real cross-entropy, hence also the perplexity
# (§6.2: it "hurts perplexity … but improves accuracy and BLEU").

# %%
if history:
    epochs = np.arange(1, len(history["loss"]) + 1) + start // t.steps_per_epoch
    figure, axes = plt.subplots(1, 3, figsize=(12, 3))
    for ax, name in zip(axes, ("loss", "masked_accuracy", "perplexity")):
        ax.plot(epochs * t.steps_per_epoch, history[name], "o-", label="train")
        if f"val_{name}" in history:
            ax.plot(epochs * t.steps_per_epoch, history[f"val_{name}"], "o-", label="dev")
        ax.set_xlabel("step")
        ax.set_title(name)
        ax.legend()
    axes[2].set_yscale("log")
    plt.tight_layout()
    plt.show()
else:
    print(f"{run.path} had already reached {t.train_steps} steps: nothing trained, no new curves.")

# %% [markdown]
# ## Translating dev sentences
#
# Beam search with beam size 4 and length penalty α = 0.6 (§6.1), scored with sacreBLEU. A model
# trained for a few dozen steps answers with nothing or with the most frequent pieces, over and
# over; the translations improve with `T2T_NOTEBOOK_STEPS` (and with `t2t-keras train`'s longer
# runs).

# %%
from t2t_keras.decoding.translator import Translator
from t2t_keras.evaluation.bleu import score

translator = Translator(model, tokenizer, method="beam", beam_size=config.decoding.beam_size,
                        alpha=config.decoding.alpha, max_extra_length=config.decoding.extra_length,
                        jit_compile=t.jit_compile)
sources = [source for source, _ in dev_pairs[:SENTENCES]]
references = [target for _, target in dev_pairs[:SENTENCES]]
hypotheses = translator.translate(sources)
for source, reference, hypothesis in zip(sources, references, hypotheses):
    print(f"source:    {source}\nreference: {reference}\nmodel:     {hypothesis}\n")
print(score(hypotheses, references, config.data.target_lang)["bleu_details"])

# %% [markdown]
# ## Averaging the last checkpoints
#
# "For the base models, we used a single model obtained by averaging the last 5 checkpoints" (§6.1).
# `average_run` writes the mean of the last `training.average_last` checkpoints to
# `RUN/averaged/model.keras`; notebooks 02 and 03 (and `t2t-keras evaluate`/`export`) use it while it
# includes the newest checkpoint.

# %%
from t2t_keras.training.averaging import average_run

print(average_run(RUN_DIR))
print(run.read_json("averaged/averaged.json")["steps"])
