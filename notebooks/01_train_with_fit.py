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
# default corpus, the English→German LibreOffice help. It looks at each piece first: the data
# pipeline (§5.1), the model (§3), the learning-rate schedule and Adam (§5.3), label smoothing (§5.4).
# Then `t2t_keras.training.train` (what `t2t-keras train` runs) compiles the model with them and calls
# `model.fit` in a distribution strategy, with TensorBoard, checkpoint and attention callbacks; the
# notebook draws the learning curves and translates a few sentences.
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
# runs this notebook with `tiny`, 30 steps, no XLA and a small corpus of its own
# (`data.source=text`).

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
# `data.sources.load_pairs` reads the configured corpus. The default one, the LibreOffice help, is
# written in English and translated paragraph by paragraph: the first call downloads two Debian
# packages (`apt-get download`, no installation), pairs paragraphs with the same id and splits by
# help page; later calls read the cache (`~/.cache/t2t_keras`).

# %%
from t2t_keras.data import sources

train_pairs = sources.as_string_pairs(sources.load_pairs(config.data, "train")[0])
dev_pairs = sources.as_string_pairs(sources.load_pairs(config.data, "dev")[0])
print(f"{len(train_pairs)} training pairs, {len(dev_pairs)} dev pairs")
for source, target in train_pairs[100:103]:
    print(f"  {source}\n  → {target}\n")

# %% [markdown]
# ## The shared vocabulary and batches of similar length
#
# Source and target share one BPE vocabulary (§5.1), trained with SentencePiece on both sides of the
# training split and saved in the run directory. The tokenizer runs inside the TensorFlow graph
# (TF-Text), so the same file serves the input pipeline and, later, the exported model.
#
# "Sentence pairs were batched together by approximate sequence length" (§5.1). Pairs go into length
# buckets, and each bucket's batch size keeps about `data.batch_tokens` tokens per side. A batch is
# `((source, target_in), target_out, sample_weight)`: the decoder reads `<s> y1 … yn` and predicts
# `y1 … yn </s>`; the weight is 0 on padding. `load_data`, the run's task's data setup, is the step `train`
# starts with. What it reads is the run's configuration, resolved once before anything is opened
# (`resolve_run`: a rerun checks that model and data did not change); `train` takes the same object below.

# %%
from t2t_keras.resolved_run import resolve_run
from t2t_keras.tasks import task_of

resolved = resolve_run(RUN_DIR, config)
run, config = resolved.run, resolved.config
data = task_of(config).load_data(run, config)
tokenizer = data.tokenizer
example = dev_pairs[0][0]
ids = tokenizer.tokenize(tf.constant([example]))[0].numpy()
print(example)
print([piece.decode() for piece in tokenizer.id_to_piece(ids).numpy()])
(source, target_in), target_out, weight = next(iter(data.train))
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
# smoothed with ε_ls = 0.1 (`LabelSmoothedCrossEntropy`). The metrics ignore padding.
# `training.compile_model` puts them together; this is the learning rate it will follow.

# %%
from t2t_keras.training.schedule import TransformerSchedule

t = config.training
schedule = TransformerSchedule(config.model.hidden_dim, warmup_steps=t.warmup_steps, scale=t.learning_rate_scale)
steps = np.arange(0, max(STEPS, 2 * t.warmup_steps))
plt.figure(figsize=(6, 2.5))
plt.plot(steps + 1, schedule(steps).numpy())
plt.axvline(t.warmup_steps, color="gray", linestyle=":")
plt.xlabel("step")
plt.ylabel("learning rate")
plt.title("eq. (3)")
plt.show()

# %% [markdown]
# ## Training with `model.fit`
#
# `train` compiles the model in a distribution strategy and runs `model.fit`, one Keras epoch being
# `steps_per_epoch` updates followed by one pass over the dev set, with its callbacks:
#
# * checkpoints of model and optimizer (step, Adam moments, schedule position) in `RUN/checkpoints`;
#   a rerun of this notebook resumes from the newest;
# * TensorBoard curves in `RUN/logs` (`tensorboard --logdir RUN/logs`);
# * a stop at exactly `train_steps` updates, also when resuming mid-epoch;
# * and the callbacks we hand it: `RunAttentionSummary` translates a few dev sentences every
#   `training.attention_every_steps` and writes per-head attention heatmaps and statistics to
#   `RUN/logs/attention`.

# %%
from t2t_keras.inspect.summary import RunAttentionSummary
from t2t_keras.training.trainer import train

result = train(resolved, callbacks=[RunAttentionSummary(run)], verbose=2)
model, history = result.model, result.history
print(f"trained from step {result.start_step} to {result.final_step} in {result.seconds / 60:.1f} min")

# %% [markdown]
# ## Learning curves
#
# Training values are means over each epoch (with dropout), validation values are measured after
# it. Label smoothing keeps the loss above the model's real cross-entropy, hence also the perplexity
# (§6.2: it "hurts perplexity … but improves accuracy and BLEU").

# %%
if history:
    epochs = np.arange(1, len(history["loss"]) + 1) + result.start_step // t.steps_per_epoch
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
from t2t_keras.decoding.generator import Generator
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.evaluation.bleu import score

generator = Generator(model, tokenizer, jit_compile=t.jit_compile)
request = GenerationRequest.from_config(config.decoding)  # the config's beam size, alpha and length limit
sources = [source for source, _ in dev_pairs[:SENTENCES]]
references = [target for _, target in dev_pairs[:SENTENCES]]
hypotheses = generator.generate(sources, request).best
for source, reference, hypothesis in zip(sources, references, hypotheses):
    print(f"source:    {source}\nreference: {reference}\nmodel:     {hypothesis}\n")
print(score(hypotheses, references, config.data.target_lang)["bleu_details"])

# %% [markdown]
# ## Averaging the last checkpoints
#
# "For the base models, we used a single model obtained by averaging the last 5 checkpoints" (§6.1).
# `average_run` writes the mean of the last `training.average_last` checkpoints to
# `RUN/averaged/` (the model's weights, like every checkpoint of the run); notebooks 02 and 03 (and
# `t2t-keras evaluate`/`export`) use it while it includes the newest checkpoint.

# %%
from t2t_keras.runs import average_run

print(average_run(RUN_DIR))
print(run.read_json(run.averaged_info_path)["steps"])
