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
# # What the heads attend to
#
# This notebook loads a trained run, translates a few sentences and shows the attention weights of
# every layer and head, in the spirit of the paper's Figures 3-5: encoder self-attention in a late
# layer (long-distance dependencies, heads that follow the structure of the sentence) and the
# encoder-decoder attention, which after training acts as a soft alignment of target to source.
#
# Any run directory works, e.g. the one notebook 01 or `t2t-keras train` wrote. A model trained for
# a few dozen steps gives nearly uniform maps; the patterns appear after a few thousand steps.

# %% [markdown]
# ## Parameters
#
# | variable | default | meaning |
# |---|---|---|
# | `T2T_NOTEBOOK_RUN_DIR` | `runs/notebook` | the trained run |
# | `T2T_NOTEBOOK_TEXT` | a dev sentence | the sentence to inspect |
# | `T2T_NOTEBOOK_SENTENCES` | `8` | dev sentences translated first |
# | `T2T_NOTEBOOK_OUT` | `RUN_DIR/attention` | where the PNG heatmaps and the HTML page go |

# %%
import os
import pathlib

RUN_DIR = os.environ.get("T2T_NOTEBOOK_RUN_DIR", "runs/notebook")
TEXT = os.environ.get("T2T_NOTEBOOK_TEXT", "")
SENTENCES = int(os.environ.get("T2T_NOTEBOOK_SENTENCES", "8"))
OUT = pathlib.Path(os.environ.get("T2T_NOTEBOOK_OUT") or pathlib.Path(RUN_DIR, "attention"))

# %% [markdown]
# ## The run and a few translations
#
# `open_artifact` opens the run: its model (the averaged checkpoints if they are up to date, else the
# newest checkpoint) and its tokenizer, loaded when first needed, and its decoding settings as the
# default request (beam search, §6.1).

# %%
import html

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

from t2t_keras.artifacts import open_artifact
from t2t_keras.evaluation.evaluate_run import load_eval_pairs
from t2t_keras.runs import RunDirectory

config = RunDirectory(RUN_DIR).load_config()
artifact = open_artifact(RUN_DIR, jit_compile=config.training.jit_compile)  # XLA if the run used it
model, tokenizer = artifact.loaded()
dev_pairs = load_eval_pairs(RUN_DIR, "dev")[:SENTENCES]
generation = artifact.generate([s for s, _ in dev_pairs], artifact.request())
for (source, reference), hypothesis in zip(dev_pairs, generation.best):
    print(f"source:    {source}\nreference: {reference}\nmodel:     {hypothesis}\n")

# %% [markdown]
# ## Attention of one sentence
#
# `extract_attention` translates the sentence greedily and runs the model over its own translation
# (`encode_with_attention`, `decode_with_attention`): weights `(layers, heads, queries, keys)` for each of the three
# kinds of attention of §3.2.3. Source pieces end with `</s>`, the decoder input starts with `<s>`.

# %%
from t2t_keras.inspect.attention import extract_attention

if not TEXT:  # a dev sentence of moderate length: long enough for structure, short enough to read
    TEXT = next((s for s, _ in dev_pairs if 6 <= len(s.split()) <= 16), dev_pairs[0][0])
maps = extract_attention(model, tokenizer, TEXT, max_extra_length=config.decoding.max_extra_length)
last = maps.encoder.shape[0] - 1
print("source:     ", maps.source_text)
print("translation:", maps.translation)
print("source pieces:", maps.source_tokens)
print("target pieces:", maps.target_tokens)
print({kind: maps.weights(kind).shape for kind in ("encoder", "decoder_self", "cross")})

# %% [markdown]
# ## Interactive view
#
# Choose the kind of attention, the layer and a head (or all heads, one colour each, as in the
# paper's figures); hover a token to keep only its lines. The page is self-contained (no network);
# the last cell also writes it to `OUT/attention.html`, which any browser opens. Frontends that do
# not run JavaScript in outputs show nothing here: the static figures below show the same data.

# %%
from t2t_keras.inspect.html_view import render_html

page = render_html(maps, title=f"Attention of {pathlib.Path(RUN_DIR).name}")
# An iframe keeps the page's script and styles apart from the notebook's.
iframe = f'<iframe srcdoc="{html.escape(page)}" style="width: 100%; height: 720px; border: none"></iframe>'
display({"text/html": iframe}, raw=True)

# %% [markdown]
# ## Figure 3: one token, every head
#
# The paper's Figure 3 follows the word "making" in layer 5 of 6 of the encoder: many heads attend
# to the distant "more difficult", completing the phrase. Here: the last encoder layer, each head
# in its own colour, from the source token that puts the most weight on one token at least three
# positions away (`</s>` aside: heads with nothing to do tend to rest there).

# %%
from t2t_keras.inspect.heads import head_entropy
from t2t_keras.inspect.heatmaps import figure_png
from t2t_keras.inspect.attention_lines import attention_lines_figure

encoder = maps.encoder[last]  # (heads, S, S)
positions = np.arange(len(maps.source_tokens))
distant = np.abs(positions[:, None] - positions[None, :]) >= 3  # (S, S): |query - key| >= 3
distant[:, -1] = distant[-1, :] = False  # neither from nor to </s>
query = int(np.argmax(np.where(distant, encoder, 0.0).max(axis=-1).mean(axis=0)))  # mean over heads
figure = attention_lines_figure(encoder, maps.source_tokens, maps.source_tokens, query=query,
                                title=f"encoder layer {last}, all heads, from {maps.source_tokens[query]!r}")
display(Image(figure_png(figure)))

# %% [markdown]
# ## Figures 4 and 5: every token, two heads
#
# Figures 4 and 5 show two heads of layer 5 attending from every word: some heads are very sharp
# (one key per query, e.g. the anaphora "its" → "Law"), others spread. The two sharpest heads of the
# last encoder layer are the ones with the lowest mean entropy.

# %%
entropy = {kind: head_entropy(maps.weights(kind)) for kind in ("encoder", "decoder_self", "cross")}
sharpest = [int(h) for h in np.argsort(entropy["encoder"][last])[:2]]
for head in sharpest:
    figure = attention_lines_figure(encoder, maps.source_tokens, maps.source_tokens, heads=[head],
                                    title=f"encoder layer {last}, head {head} "
                                          f"(entropy {entropy['encoder'][last, head]:.2f} nats)")
    display(Image(figure_png(figure)))

# %% [markdown]
# ## Every head of a layer
#
# The per-head heatmaps that `t2t-keras inspect` and the TensorBoard `AttentionSummary` write, here
# for the last encoder layer (rows attend to columns, colour from 0 to 1).

# %%
from t2t_keras.inspect.heatmaps import layer_png

display(Image(layer_png(maps, "encoder", last)))

# %% [markdown]
# ## Encoder-decoder attention as an alignment
#
# Each row is a decoder position (the state that reads the target piece on the left and predicts
# the next one); averaged over the heads of the last layer, a trained model puts most weight on the
# source pieces being translated: a soft alignment.

# %%
cross = maps.cross[last].mean(axis=0)  # (T, S)
figure, axes = plt.subplots(figsize=(0.35 * len(maps.source_tokens) + 2, 0.3 * len(maps.target_tokens) + 1.5))
axes.imshow(cross, cmap="viridis", vmin=0, vmax=1, aspect="auto")
axes.set_xticks(range(len(maps.source_tokens)), maps.source_tokens, rotation=90)
axes.set_yticks(range(len(maps.target_tokens)), maps.target_tokens)
axes.set_title(f"encoder-decoder attention, layer {last}, mean over heads")
plt.show()
for target, row in zip(maps.target_tokens, cross):
    print(f"{target:>14} → {maps.source_tokens[int(np.argmax(row))]} ({row.max():.2f})")

# %%
display(Image(layer_png(maps, "cross", last)))

# %% [markdown]
# ## How sharp is each head?
#
# Mean entropy of each head's attention distributions, per layer, for the three kinds: 0 is a head
# that always picks one token, `log(keys)` one that attends uniformly to the whole sentence. Heads
# that all sit near the top of the scale have not learned yet.

# %%
from t2t_keras.inspect.kinds import KIND_TITLES

figure, axes = plt.subplots(1, 3, figsize=(13, 0.5 * (last + 1) + 2))
for ax, (kind, values) in zip(axes, entropy.items()):
    uniform = np.log(maps.weights(kind).shape[-1])
    image = ax.imshow(values, cmap="magma_r", vmin=0, vmax=uniform, aspect="auto")
    for (layer, head), value in np.ndenumerate(values):
        ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=8,
                color="white" if value > uniform / 2 else "black")
    ax.set(title=KIND_TITLES[kind], xlabel="head", ylabel="layer",
           xticks=range(values.shape[1]), yticks=range(values.shape[0]))
    figure.colorbar(image, ax=ax, label=f"nats (uniform: {uniform:.2f})")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Every layer as files
#
# `inspect_run` (`t2t-keras inspect`) writes one PNG per kind and layer, and the HTML page, to `OUT`.

# %%
from t2t_keras.inspect.inspect_run import inspect_run

result = inspect_run(RUN_DIR, text=TEXT, out=OUT)
print(result.html)
for path in sorted(result.images.values()):
    print(path)
