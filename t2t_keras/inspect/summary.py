"""Attention in TensorBoard during training: per-head heatmaps and per-layer scalars of a probe set.

Every `every_steps` optimizer updates, `AttentionSummary` translates a few fixed
probe sentences greedily (with a short output limit, to stay cheap), runs the
model over its own translations and writes, for each attention kind and layer:

    attention/{kind}/layer_{i}               one image per probe sentence: a grid of per-head heatmaps
    attention_entropy/{kind}/layer_{i}       mean entropy (nats) of the attention distributions
    attention_eos_share/{encoder,cross}/...  mean weight on the source's </s>
    attention_bos_share/decoder_self/...     mean weight on the target's <s> (the decoder input holds no </s>)
    attention_pad_share/{kind}/layer_{i}     mean weight on padding keys: 0 when masking is right

and the probe translations as text (`attention/translations`). Means run over
heads and over real (non-padding) query positions of the padded probe batch;
one extra PAD column is always appended, so the padding share is meaningful
even when every probe sentence has the same length.
"""

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.config import TrainingConfig
from t2t_keras.data import sources
from t2t_keras.inspect.attention import extract_batch
from t2t_keras.inspect.heads import entropy
from t2t_keras.inspect.heatmaps import figure_png, head_grid_figure, layer_title
from t2t_keras.inspect.kinds import KIND_TITLES, KINDS
from t2t_keras.runs import open_run

PROBE_EXTRA_LENGTH = TrainingConfig.attention_max_extra_length  # the probes' output limit: input length + this

# The special token whose attention share is logged for each kind (keys are source ids except in decoder_self): the
# model's end id, or its decoder start id (`SpecialIds` field).
BOUNDARY = {"encoder": ("eos", "eos"), "decoder_self": ("bos", "decoder_start"), "cross": ("eos", "eos")}


def _masked_layer_mean(values, query_real):
    """`(layers,)` mean of `values` `(batch, layers, heads, queries)` over heads and real queries."""
    mask = np.broadcast_to(query_real[:, None, None, :], values.shape)
    return np.sum(values * mask, axis=(0, 2, 3)) / np.sum(mask, axis=(0, 2, 3))


def attention_statistics(batch):
    """Per-layer scalars of a `BatchAttention`: `{tag: value}` (see the module docstring for the tags)."""
    scalars = {}
    for kind in KINDS:
        weights = batch.weights(kind).astype(np.float64)  # (batch, layers, heads, queries, keys)
        query_real = batch.query_ids(kind) != batch.ids.pad  # (batch, queries)
        keys = batch.key_ids(kind)[:, None, None, None, :]  # broadcast over layers, heads, queries
        boundary_name, field = BOUNDARY[kind]
        boundary_id = getattr(batch.ids, field)
        per_row = {
            "attention_entropy": entropy(weights),
            f"attention_{boundary_name}_share": np.sum(weights * (keys == boundary_id), axis=-1),
            "attention_pad_share": np.sum(weights * (keys == batch.ids.pad), axis=-1),
        }
        for name, values in per_row.items():
            for layer, value in enumerate(_masked_layer_mean(values, query_real)):
                scalars[f"{name}/{kind}/layer_{layer}"] = float(value)
    return scalars


def _stack_images(pngs):
    """uint8 `(count, height, width, 3)` of PNGs of different sizes, padded with white at the bottom/right."""
    images = [tf.io.decode_png(png, channels=3).numpy() for png in pngs]
    height = max(image.shape[0] for image in images)
    width = max(image.shape[1] for image in images)
    stacked = np.full((len(images), height, width, 3), 255, np.uint8)
    for i, image in enumerate(images):
        stacked[i, :image.shape[0], :image.shape[1]] = image
    return stacked


def _probe_description(examples):
    return "\n\n".join(
        f"probe {i}: `{maps.source_text}` → `{maps.translation}`" for i, maps in enumerate(examples)
    )


def _write_images(examples, dpi):
    """One image summary per kind and layer, holding one heatmap grid per probe sentence."""
    description = _probe_description(examples)
    for kind in KINDS:
        for layer in range(examples[0].weights(kind).shape[0]):
            pngs = []
            for maps in examples:
                queries, keys = maps.axis_tokens(kind)
                figure = head_grid_figure(maps.weights(kind)[layer], queries, keys, layer_title(kind, layer))
                pngs.append(figure_png(figure, dpi))
            tf.summary.image(f"attention/{kind}/layer_{layer}", _stack_images(pngs), max_outputs=len(pngs),
                             description=f"{KIND_TITLES[kind]}, one image per probe sentence.\n\n{description}")


def write_attention_summaries(model, tokenizer, probe_sentences, writer, step, max_extra_length=PROBE_EXTRA_LENGTH,
                              dpi=100, images=True):
    """Translates the probe sentences and writes attention images and scalars at `step`.

    Args:
        model: a built `Transformer`.
        tokenizer: the run's `Tokenizer`.
        probe_sentences: source sentences, decoded together as one padded batch.
        writer: a `tf.summary` writer.
        step: the summary step (optimizer updates).
        max_extra_length: output limit of the probe translations (input length + this).
        dpi: resolution of the heatmap images.
        images: also write the heatmaps (scalars and translations are always written).

    Returns:
        the scalars written, `{tag: value}`.
    """
    batch, translations = extract_batch(model, tokenizer, probe_sentences, max_extra_length=max_extra_length,
                                        extra_padding=1)
    scalars = attention_statistics(batch)
    with writer.as_default(step=step):
        for tag, value in scalars.items():
            tf.summary.scalar(tag, value)
        tf.summary.text("attention/translations", tf.constant(
            [f"{source} → {target}" for source, target in zip(probe_sentences, translations)]))
        if images:
            examples = [batch.example(i, tokenizer, translations[i], probe_sentences[i])
                        for i in range(len(probe_sentences))]
            _write_images(examples, dpi)
    writer.flush()
    return scalars


class AttentionSummary(keras.callbacks.Callback):
    """Writes attention heatmaps and statistics of fixed probe sentences to TensorBoard during `fit`.

    Steps are optimizer updates (`optimizer.iterations`), as for the training
    scalars, so curves continue when a run is resumed. See the module docstring
    for the tags.

    Args:
        tokenizer: the run's `Tokenizer`.
        probe_sentences: a few source sentences (e.g. the first dev sentences).
        log_dir: directory of the event files (e.g. RUN/logs/attention).
        every_steps: write after every this many optimizer updates.
        max_extra_length: output limit of the probe translations (input length + this);
            keep it short, decoding runs eagerly.
        dpi: resolution of the heatmap images.
        write_on_train_end: also write once when training ends (at the final step),
            unless that step was just written.
    """

    def __init__(self, tokenizer, probe_sentences, log_dir, every_steps=1000, max_extra_length=PROBE_EXTRA_LENGTH,
                 dpi=100, write_on_train_end=False):
        super().__init__()
        probe_sentences = [probe_sentences] if isinstance(probe_sentences, str) else list(probe_sentences)
        if not probe_sentences:
            raise ValueError("AttentionSummary needs at least one probe sentence. Received: probe_sentences=[]")
        if not isinstance(every_steps, int) or every_steps <= 0:
            raise ValueError(f"every_steps must be a positive integer. Received: every_steps={every_steps!r}")
        if max_extra_length < 1:
            raise ValueError(f"max_extra_length must be at least 1. Received: max_extra_length={max_extra_length}")
        self.tokenizer = tokenizer
        self.probe_sentences = probe_sentences
        self.log_dir = str(log_dir)
        self.every_steps = every_steps
        self.max_extra_length = max_extra_length
        self.dpi = dpi
        self.write_on_train_end = write_on_train_end
        self._writer = None
        self._last_step = None

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(self.log_dir)

    def _write(self):
        step = int(self.model.optimizer.iterations.numpy())
        write_attention_summaries(self.model, self.tokenizer, self.probe_sentences, self._writer, step,
                                  self.max_extra_length, self.dpi)
        self._last_step = step

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        # With gradient accumulation several batches end at the same step: write it once.
        if step % self.every_steps == 0 and step != self._last_step:
            self._write()

    def on_train_end(self, logs=None):
        if self._writer is None:
            return
        if self.write_on_train_end and self._last_step != int(self.model.optimizer.iterations.numpy()):
            self._write()
        self._writer.close()
        self._writer = None


class RunAttentionSummary(keras.callbacks.Callback):
    """The `AttentionSummary` a training run's config asks for (`training.attention_*`), for `train(callbacks=...)`.

    The probes are the run's first dev sentences and the tokenizer is the
    run's; both are read when training begins, once `train` has written the
    run's config and vocabulary. Nothing is written when
    `training.attention_every_steps` is 0 or the run has no dev split.
    Runs on the chief worker only.

    Args:
        run_dir: the run directory being trained.
    """

    chief_only = True
    time_part = "attention summaries"  # its part of the session's wall time (training/wall_time.py)

    def __init__(self, run_dir):
        super().__init__()
        self.run = open_run(run_dir)
        self.summary = None

    def on_train_begin(self, logs=None):
        config = self.run.load_config()
        t = config.training
        if not t.attention_every_steps or not sources.has_split(config.data, "dev"):
            return
        dev_pairs, _ = sources.load_pairs(config.data, "dev")
        probes = [source for source, _ in sources.as_string_pairs(dev_pairs, t.attention_probes)]
        if not probes:
            return
        self.summary = AttentionSummary(self.run.load_tokenizer(), probes, self.run.log_dir / "attention",
                                        every_steps=t.attention_every_steps,
                                        max_extra_length=t.attention_max_extra_length)
        self.summary.set_model(self.model)
        self.summary.on_train_begin(logs)

    def on_train_batch_end(self, batch, logs=None):
        if self.summary is not None:
            self.summary.on_train_batch_end(batch, logs)

    def on_train_end(self, logs=None):
        if self.summary is not None:
            self.summary.on_train_end(logs)

