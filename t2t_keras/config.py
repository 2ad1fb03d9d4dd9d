"""Configuration: frozen dataclasses, presets in `t2t_keras/configs/*.yaml` (`configs/`), strict validation.

A config file has up to four sections, `model`, `data`, `training` and
`decoding`, and may start with `extends: PRESET` to inherit from another file.
Unknown sections or keys and invalid values raise `ConfigError` naming the
field, the value received and what is allowed. A relative data file path in a
config file is read from the file's folder where the file is there, else from the
current directory (`config_paths`).
"""

import dataclasses
import difflib
import logging
import os
import pathlib
import typing

import yaml

from t2t_keras import config_paths
from t2t_keras.architecture import (
    ACTIVATION_CHOICES,
    ARCHITECTURE_CHOICES,
    NORMALIZATION_CHOICES,
    POSITION_CHOICES,
    TIE_CHOICES,
    check_choice,
    check_per_layer_bias,
    check_position_switches,
    check_relative_switches,
    check_softmax,
    check_tied_vocabularies,
    head_dims,
)
from t2t_keras.errors import ConfigError
from t2t_keras.special_ids import SpecialIds

logger = logging.getLogger(__name__)

# The presets ship inside the package (`configs/` at the top of the repository links here), so an
# installed wheel finds them too; T2T_KERAS_CONFIGS points to another directory of presets.
CONFIG_DIR = pathlib.Path(os.environ.get("T2T_KERAS_CONFIGS", pathlib.Path(__file__).resolve().parent / "configs"))


def _check_positive(section, obj, *names):
    for name in names:
        value = getattr(obj, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise ConfigError(f"{section}.{name} must be a positive integer. Received: {name}={value!r}")


def _check_rate(section, obj, *names):
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ConfigError(f"{section}.{name} must be a number in [0, 1). Received: {name}={value!r}")


def _check_choice(section, obj, name, choices):
    check_choice(name, getattr(obj, name), choices, prefix=f"{section}.")


def check_shards(value, prefix=""):
    """`value` if it is "auto" or a positive integer (`decoding.shards`, `decoding.sharding`), else a ConfigError."""
    if value != "auto" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"{prefix}shards must be 'auto' or a positive integer. Received: shards={value!r}")
    return value


DECODING_PRECISIONS = ("float32", "bfloat16")  # decoding.precision (decoding.weight_precision)
WEIGHTS_DTYPES = ("float32", "bfloat16")  # model.weights_dtype
ALIGNMENT_ROWS = ("predicts", "reads")  # decoding.alignment_rows (decoding.alignment)
LENGTH_PENALTIES = ("gnmt", "average", "none", "power")  # decoding.length_penalty (decoding.length_normalization)
# decoding.stopping: when a beam search is done with a sentence (decoding.stopping); the "transformers" rules are
# Hugging Face generate's, by its early_stopping (False, True, "never")
STOPPING_RULES = ("beam", "exact", "transformers", "transformers_early", "transformers_never")
MODEL_SOURCES = ("auto", "averaged", "latest", "best")  # which weights of a run a command uses (runs.run_weights)
BLEU_PROTOCOLS = ("sacrebleu", "paper")  # the BLEU `evaluate --bleu` reports beside chrF (evaluation.bleu)
# The task each architecture trains (`training.task`).
TASK_OF_ARCHITECTURE = {"encoder_decoder": "translation", "decoder_only": "lm", "encoder_only": "mlm"}
ARCHITECTURE_OF_TASK = {task: architecture for architecture, task in TASK_OF_ARCHITECTURE.items()}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture (§3, Table 3). Paper names in brackets."""

    architecture: str = "encoder_decoder"  # the paper's; or "decoder_only" (causal LM), "encoder_only" (masked LM)
    vocab_size: typing.Optional[int] = None  # shared vocabulary; defaults to data.vocab_size
    hidden_dim: int = 512  # [d_model]
    num_layers: int = 6  # [N] encoder layers (and decoder layers unless num_decoder_layers)
    num_decoder_layers: typing.Optional[int] = None  # decoder depth when it differs
    num_heads: int = 8  # [h]
    key_dim: typing.Optional[int] = None  # [d_k], default hidden_dim / num_heads
    value_dim: typing.Optional[int] = None  # [d_v], default key_dim
    intermediate_dim: int = 2048  # [d_ff]
    activation: str = "relu"  # feed-forward nonlinearity (§3.3)
    dropout: float = 0.1  # [P_drop] residual and embedding dropout (§5.4)
    attention_dropout: float = 0.0  # dropout on attention weights (not in the paper)
    activation_dropout: float = 0.0  # dropout inside the feed-forward network (not in the paper)
    # "sinusoidal" (§3.5), "learned" (Table 3 E), or "relative": T5's learned bias of bucketed relative positions
    # added to every self-attention's scores (encoder-decoder only)
    position_encoding: str = "sinusoidal"
    max_length: int = 1024  # longest sequence in tokens; sizes learned position tables
    tie_embeddings: str = "all"  # "all" (§3.4), "target" or "none"; single-stack models: tied unless "none"
    # the source vocabulary's size when it is not the target's (tie_embeddings target or none); None: vocab_size
    source_vocab_size: typing.Optional[int] = None
    softmax: str = "full"  # "full", or "adaptive" (Grave et al., 2017; encoder-decoder only)
    adaptive_cutoffs: typing.Optional[typing.List[int]] = None  # ids where the adaptive softmax's tail clusters start
    normalize_first: bool = False  # pre-LN instead of the paper's post-LN, with a final LayerNorm per stack
    layer_norm_epsilon: float = 1e-6
    # The switches an imported checkpoint needs (t2t-keras import); the defaults are the paper's model.
    scale_embeddings: bool = True  # embeddings times sqrt(d_model) (§3.4); Marian's and fairseq's scale_embedding
    position_sinusoid: str = "interleaved"  # §3.5's layout; "split" (Marian), "fairseq" (M2M-100, NLLB)
    position_offset: int = 0  # the first position's index in the sinusoid (fairseq: padding id + 1)
    final_logits_bias: bool = False  # a trained bias added to the output logits (Marian's final_logits_bias)
    relative_buckets: int = 32  # position_encoding relative: T5's relative_attention_num_buckets
    relative_max_distance: int = 128  # position_encoding relative: T5's relative_attention_max_distance
    # position_encoding relative: a table in every layer's self-attention (umT5), not one per stack shared by its
    # layers (T5)
    relative_bias_per_layer: bool = False
    normalization: str = "layer"  # LayerNorm (§3.1), or "rms": T5's RMS normalisation (a scale, no mean, no offset)
    gated_feed_forward: bool = False  # T5 v1.1's gated feed-forward: (act(x W1) * (x G)) W2
    use_bias: bool = True  # biases in the attention and feed-forward projections (T5: none)
    scale_attention: bool = True  # 1/sqrt(d_k) in attention (§3.2.1); T5 folds it into its initialisation
    scale_decoder_output: bool = False  # decoder output times d_model^-0.5 before the tied projection (T5 v1.0)
    # pad, unk, bos, eos and decoder_start ids (special_ids.SpecialIds): what the masks and the loss read
    special_ids: SpecialIds = dataclasses.field(default_factory=SpecialIds)
    # the dtype of the weights, in memory and in the run's checkpoints: "bfloat16" (`import --precision bfloat16`)
    # builds the model with Keras' bfloat16 policy, half the bytes of float32 and bfloat16 arithmetic; such a run
    # decodes and exports, and is not trained (training keeps float32 weights)
    weights_dtype: str = "float32"

    def __post_init__(self):
        _check_positive("model", self, "vocab_size", "source_vocab_size", "hidden_dim", "num_layers",
                        "num_decoder_layers", "num_heads",
                        "key_dim", "value_dim", "intermediate_dim", "max_length")
        _check_rate("model", self, "dropout", "attention_dropout", "activation_dropout")
        _check_choice("model", self, "activation", ACTIVATION_CHOICES)
        _check_choice("model", self, "position_encoding", POSITION_CHOICES)
        _check_choice("model", self, "normalization", NORMALIZATION_CHOICES)
        check_relative_switches(self.relative_buckets, self.relative_max_distance, prefix="model.")
        check_position_switches(self.position_encoding, self.position_sinusoid, self.position_offset,
                                self.hidden_dim, prefix="model.")
        _check_model_switches(self)
        _check_choice("model", self, "tie_embeddings", TIE_CHOICES)
        _check_choice("model", self, "architecture", ARCHITECTURE_CHOICES)
        _check_choice("model", self, "weights_dtype", WEIGHTS_DTYPES)
        check_softmax(self.softmax, self.tie_embeddings, prefix="model.")
        if self.softmax == "adaptive" and self.architecture != "encoder_decoder":
            raise ConfigError("model.softmax=adaptive is implemented for the encoder-decoder: set "
                              "model.softmax=full for a single-stack model.")
        if self.adaptive_cutoffs and self.softmax != "adaptive":
            raise ConfigError("model.adaptive_cutoffs is set but model.softmax is 'full': set model.softmax=adaptive "
                              "or remove the cutoffs.")
        if self.architecture != "encoder_decoder" and self.num_decoder_layers is not None:
            raise ConfigError(f"model.num_decoder_layers is for the encoder-decoder; a {self.architecture} model has "
                              "one stack of model.num_layers blocks. Remove num_decoder_layers.")
        head_dims(self.hidden_dim, self.num_heads, self.key_dim, self.value_dim, prefix="model.")

    @property
    def head_key_dim(self):
        return head_dims(self.hidden_dim, self.num_heads, self.key_dim, self.value_dim)[0]

    @property
    def head_value_dim(self):
        return head_dims(self.hidden_dim, self.num_heads, self.key_dim, self.value_dim)[1]

    @property
    def decoder_layers(self):
        return self.num_decoder_layers or self.num_layers

    @property
    def dtype_policy_name(self):
        """The name of the Keras dtype policy of `weights_dtype`: None (Keras' default, float32) or "bfloat16"."""
        return None if self.weights_dtype == "float32" else self.weights_dtype


# The switches a single-stack model does not take (build.build_model), with their defaults.
ENCODER_DECODER_SWITCHES = {"source_vocab_size": None, "scale_embeddings": True, "position_sinusoid": "interleaved",
                            "position_offset": 0,
                            "final_logits_bias": False, "relative_buckets": 32, "relative_max_distance": 128,
                            "relative_bias_per_layer": False,
                            "normalization": "layer", "gated_feed_forward": False, "use_bias": True,
                            "scale_attention": True, "scale_decoder_output": False}


def _check_model_switches(model):
    """`special_ids` as `SpecialIds`, each below the vocabulary size; the imported models' switches checked."""
    try:
        object.__setattr__(model, "special_ids", SpecialIds.of(model.special_ids))
    except ValueError as error:
        raise ConfigError(f"model.{error}") from None
    flags = ("scale_embeddings", "final_logits_bias", "gated_feed_forward", "use_bias", "scale_attention",
             "scale_decoder_output", "relative_bias_per_layer")
    wrong = [f"{flag}={getattr(model, flag)!r}" for flag in flags if not isinstance(getattr(model, flag), bool)]
    if wrong:
        raise ConfigError(f"model.{', model.'.join(flags)} must each be true or false. Received: {', '.join(wrong)}")
    check_per_layer_bias(model.position_encoding, model.relative_bias_per_layer, prefix="model.")
    if model.position_encoding == "relative" and model.architecture != "encoder_decoder":
        raise ConfigError(f"model.position_encoding=relative is implemented for the encoder-decoder; a "
                          f"{model.architecture} model takes sinusoidal or learned positions.")
    check_tied_vocabularies(model.tie_embeddings, model.vocab_size, model.source_vocab_size, prefix="model.")
    if model.final_logits_bias and model.softmax == "adaptive":
        raise ConfigError("model.final_logits_bias adds a bias to the full softmax's logits; the adaptive softmax "
                          "has its own: set model.softmax=full or model.final_logits_bias=false.")
    largest = max(model.special_ids.to_dict().items(), key=lambda item: item[1])
    if model.vocab_size is not None and largest[1] >= model.vocab_size:
        raise ConfigError(f"model.special_ids.{largest[0]}={largest[1]} is not an id of the vocabulary of "
                          f"model.vocab_size={model.vocab_size}: set the special ids below the vocabulary size.")
    changed = [key for key, default in ENCODER_DECODER_SWITCHES.items() if getattr(model, key) != default]
    if model.architecture != "encoder_decoder" and changed:
        raise ConfigError(f"model.{changed[0]} is a switch of the encoder-decoder (imported checkpoints); a "
                          f"{model.architecture} model takes its default: remove model.{changed[0]}.")


# The values of `data.source`; the corpora prepared from Debian's archive are data/libreoffice.py and
# data/debian_descriptions.py.
DATA_SOURCES = ("libreoffice", "debian_descriptions", "text", "tsv", "tfds")
# `data.pipeline`: how training batches are made (tasks/data_route.py).
PIPELINE_CHOICES = ("auto", "memory", "prepared")
# The schemes of `data.tokenizer`; a run directory saved without the key was made with "bpe".
TOKENIZER_CHOICES = ("bpe", "unigram", "wordpiece", "pretrained")  # pretrained: an imported checkpoint's


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it becomes batches (§5.1)."""

    # "libreoffice" (default corpus), "debian_descriptions" (Debian package descriptions, en-de), "text", "tsv"
    # or "tfds"
    source: str = "libreoffice"
    source_lang: str = "en"
    target_lang: str = "de"
    train_files: typing.Optional[typing.List[str]] = None  # text: [source, target]; tsv: [file]
    dev_files: typing.Optional[typing.List[str]] = None
    test_files: typing.Optional[typing.List[str]] = None
    tfds_name: str = "wmt14_translate/de-en"  # for source: tfds
    # "bpe" (the paper's), "unigram" (SentencePiece), "wordpiece" (BERT's) or "pretrained" (an imported
    # checkpoint's, t2t-keras import); data/tokenizers.py
    tokenizer: str = "bpe"
    vocab_size: int = 8000  # shared vocabulary, special ids included (the paper: ~37,000 BPE pieces)
    max_length: int = 128  # training pairs longer than this (tokens, EOS included) are dropped and counted
    batch_tokens: int = 4096  # tokens per side per step (the paper: ~25,000)
    shuffle_buffer: int = 20000
    # Several corpora in one run, e.g. [{source: tfds, tfds_name: ..., weight: 0.7}, {source: text, train_files:
    # [a, b], weight: 0.3}]: training draws from them by weight; dev and test come from the first one.
    sources: typing.Optional[typing.List[dict]] = None
    # Tasks lm and mlm: the side of the corpus they learn from; with source: text, *_files may name one
    # plain text file (one sentence per line) instead.
    lm_side: str = "target"  # "source" or "target"
    # How training batches are made (tasks/data_route.py): "memory" reads the split into memory; "prepared"
    # tokenizes it once into shards in RUN/prepared/ (`t2t-keras prepare`); both resume by seeking (a TFDS
    # corpus, a mixture or an lm/mlm run in memory streams instead). "auto" takes prepared for large text/tsv
    # corpora or a run that has RUN/prepared/.
    pipeline: str = "auto"
    # Pairs per prepared shard. Several workers need at least one shard each: lower it for a small corpus.
    pairs_per_shard: int = 100000

    def __post_init__(self):
        _check_choice("data", self, "source", DATA_SOURCES)
        _check_source_languages(self)
        _check_choice("data", self, "tokenizer", TOKENIZER_CHOICES)
        _check_choice("data", self, "lm_side", ("source", "target"))
        _check_choice("data", self, "pipeline", PIPELINE_CHOICES)
        _check_positive("data", self, "vocab_size", "max_length", "batch_tokens", "shuffle_buffer",
                        "pairs_per_shard")
        for index, entry in enumerate(self.sources or ()):
            _check_source_entry(self, index, entry)


def _check_source_languages(data_config):
    """`data.source: debian_descriptions` holds English and German only, read either way round."""
    languages = {data_config.source_lang, data_config.target_lang}
    if data_config.source == "debian_descriptions" and languages != {"en", "de"}:
        raise ConfigError(
            "data.source='debian_descriptions' pairs English and German, from the Translation-en and "
            "Translation-de indexes of the Debian archive (its other Translation-<lang> indexes are not read): "
            "set data.source_lang: en and data.target_lang: de, or the reverse. "
            f"Received: source_lang={data_config.source_lang!r}, target_lang={data_config.target_lang!r}"
        )


SOURCE_ENTRY_KEYS = ("source", "train_files", "dev_files", "test_files", "tfds_name", "weight")


def _check_source_entry(data_config, index, entry):
    """One corpus of `data.sources`: a mapping of SOURCE_ENTRY_KEYS with a positive weight, itself valid."""
    where = f"data.sources[{index}]"
    if not isinstance(entry, dict) or "source" not in entry:
        raise ConfigError(f"{where} must be a mapping with a 'source' (and its files or tfds_name, and a weight). "
                          f"Received: {entry!r}")
    unknown = sorted(set(entry) - set(SOURCE_ENTRY_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}. Allowed: {', '.join(SOURCE_ENTRY_KEYS)}.")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
        raise ConfigError(f"{where}.weight must be a positive number. Received: weight={weight!r}")
    fields = {key: value for key, value in entry.items() if key != "weight"}
    try:
        dataclasses.replace(data_config, sources=None, **fields)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimisation (§5.3, §5.4) and the run's bookkeeping."""

    train_steps: int = 100000  # the base model's 100K steps
    warmup_steps: int = 4000  # eq. (3)
    learning_rate_scale: float = 1.0  # multiplies eq. (3)
    learning_rate: typing.Optional[float] = None  # a constant rate instead of eq. (3) (no warmup); None: eq. (3)
    label_smoothing: float = 0.1  # [ε_ls]
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer update, exact (training/accumulation.py)
    mixed_precision: str = "float32"  # "float32", "mixed_float16", "mixed_bfloat16" or "auto" (training/precision.py)
    jit_compile: typing.Union[bool, str] = True  # XLA (Keras leaves it off on CPU unless asked); or "auto"
    fuse_elementwise: typing.Union[bool, str] = "auto"  # XLA-fuse the ops between graph-mode matmuls; "auto": bf16 CPU
    strategy: str = "auto"  # "auto", "mirrored", "multi_worker" or "one_device"
    steps_per_epoch: int = 1000  # Keras epoch length: logging and validation interval
    checkpoint_every_steps: int = 1000
    checkpoint_every_minutes: float = 10.0  # §6.1 wrote checkpoints every 10 minutes
    keep_checkpoints: int = 20
    average_last: int = 5  # §6.1: 5 for base, 20 for big
    attention_every_steps: int = 0  # attention heatmaps/statistics to TensorBoard every N steps; 0 = off
    attention_probes: int = 4  # the first N dev sentences are decoded for those summaries
    attention_max_extra_length: int = 10  # probe translations stop at input length + this
    eval_every_steps: int = 0  # dev BLEU and dev loss every N updates, best checkpoint in RUN/best/; 0 = off
    eval_sentences: int = 500  # dev BLEU on a fixed sample of at most this many dev sentences
    eval_beam_size: int = 1  # search for dev BLEU: 1 = greedy, more = beam search (decoding.alpha)
    best_metric: str = "bleu"  # what RUN/best/ keeps the best of: "bleu" (higher) or "loss" (dev loss, lower)
    early_stopping_patience: int = 0  # stop after this many evaluations without improvement; 0 = off
    # The quality curve (RUN/quality.json, training/quality.py): dev BLEU of a fixed sample of at most
    # quality_sentences dev sentences, greedy, every quality_every_minutes minutes of training; 0 = off.
    quality_every_minutes: float = 0.0
    quality_sentences: int = 100
    # Low-rank adapters (Hu et al., 2021) of this rank on the attention and feed-forward projections, every other
    # weight frozen (adapters.py); at most the smallest projection's width. None (null): off, every weight trains.
    lora_rank: typing.Optional[int] = None
    # A diverging loss (training/guard.py, training/recovery.py): a non-finite loss or gradient norm, or a loss
    # spike, is caught at its update, which is not applied. "rollback" returns to the last checkpoint, skips the
    # batch and trains the next rollback_steps updates in float32 (a mixed_bfloat16 run, Marian's fallback) or at
    # rollback_learning_rate_factor times the rate, then goes on; "stop" ends the run with the step and what was
    # found, the last checkpoint intact. The default is rollback: a long run is left unattended (the main job's
    # time budget), and a rollback costs at most the updates since the last checkpoint; a run that keeps
    # diverging still stops, after max_rollbacks rollbacks to the same checkpoint.
    on_divergence: str = "rollback"
    # A spike: a loss above the mean of the last spike_window sound updates by more than spike_deviations of their
    # standard deviations, tested once spike_min_steps of them are there; null: no spike test (NaN and Inf are
    # always caught).
    spike_deviations: typing.Optional[float] = 6.0
    spike_window: int = 100
    spike_min_steps: int = 20
    rollback_steps: int = 200  # updates after a rollback in float32 or at the lowered rate
    rollback_learning_rate_factor: float = 0.5  # the lowered rate: this times the rate (float32 and mixed_float16)
    max_rollbacks: int = 3  # rollbacks to one checkpoint before the run stops (no newer checkpoint: no progress)
    # The memory a training step may take, in GB (1e9 bytes); null: what the machine has available. A step estimated
    # above it splits each batch into micro-batches (accumulated: the same update), or is refused (memory_fit.py).
    memory_limit_gb: typing.Optional[float] = None
    seed: int = 1234
    task: typing.Optional[str] = None  # "translation", "lm" or "mlm"; None: the one model.architecture trains

    def __post_init__(self):
        if self.task is not None:
            _check_choice("training", self, "task", tuple(TASK_OF_ARCHITECTURE.values()))
        _check_positive("training", self, "train_steps", "warmup_steps", "gradient_accumulation_steps",
                        "steps_per_epoch", "checkpoint_every_steps", "keep_checkpoints", "average_last",
                        "attention_probes", "attention_max_extra_length", "eval_sentences", "eval_beam_size",
                        "quality_sentences")
        for name in ("attention_every_steps", "eval_every_steps", "early_stopping_patience"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"training.{name} must be an integer >= 0 (0 = off). Received: {value!r}")
        rank = self.lora_rank
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0):
            raise ConfigError("training.lora_rank must be a positive integer (the adapters' rank), or null to train "
                              f"every weight without adapters. Received: lora_rank={rank!r}")
        minutes = self.quality_every_minutes
        if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not minutes >= 0:
            raise ConfigError("training.quality_every_minutes must be a number of minutes >= 0 (0 = off). Received: "
                              f"quality_every_minutes={minutes!r}")
        _check_choice("training", self, "best_metric", ("bleu", "loss"))
        if self.early_stopping_patience and not self.eval_every_steps:
            raise ConfigError("training.early_stopping_patience counts dev evaluations, which are off: set "
                              "training.eval_every_steps (e.g. 1000) or early_stopping_patience=0.")
        _check_rate("training", self, "label_smoothing")
        rate = self.learning_rate
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0):
            raise ConfigError("training.learning_rate must be a positive number (a constant rate), or null for the "
                              f"schedule of eq. (3). Received: learning_rate={rate!r}")
        _check_choice("training", self, "mixed_precision", ("float32", "mixed_float16", "mixed_bfloat16", "auto"))
        if self.jit_compile not in (True, False, "auto"):
            raise ConfigError(f"training.jit_compile must be true, false or auto. Received: {self.jit_compile!r}")
        if self.fuse_elementwise not in (True, False, "auto"):
            raise ConfigError("training.fuse_elementwise must be true, false or auto. "
                              f"Received: {self.fuse_elementwise!r}")
        _check_choice("training", self, "strategy", ("auto", "mirrored", "multi_worker", "one_device"))
        _check_divergence(self)


ON_DIVERGENCE = ("rollback", "stop")  # training.on_divergence


def _check_divergence(training):
    """training.on_divergence and the settings of the spike test, the rollback and the memory limit."""
    _check_choice("training", training, "on_divergence", ON_DIVERGENCE)
    _check_positive("training", training, "spike_window", "spike_min_steps", "rollback_steps", "max_rollbacks")
    if not 2 <= training.spike_min_steps <= training.spike_window:
        raise ConfigError(f"training.spike_min_steps must be between 2 and training.spike_window="
                          f"{training.spike_window} (a standard deviation needs two losses, and the window holds at "
                          f"most spike_window). Received: spike_min_steps={training.spike_min_steps}")
    for name, value, what in (("spike_deviations", training.spike_deviations, "or null for no spike test"),
                              ("memory_limit_gb", training.memory_limit_gb, "or null for the machine's memory")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ConfigError(f"training.{name} must be a positive number, {what}. Received: {name}={value!r}")
    factor = training.rollback_learning_rate_factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < 1:
        raise ConfigError("training.rollback_learning_rate_factor must be a number in (0, 1): the rate after a "
                          f"rollback is this times the usual one. Received: rollback_learning_rate_factor={factor!r}")


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """Inference (§6.1)."""

    beam_size: int = 4
    alpha: float = 0.6  # the length penalty's exponent
    # "gnmt": ((5+|Y|)/6)^alpha (GNMT's, §6.1); "power": |Y|^alpha (Hugging Face's and fairseq's); "average": |Y|;
    # "none" (decoding/length_normalization.py)
    length_penalty: str = "gnmt"
    max_extra_length: int = 50  # maximum output length = input length + max_extra_length (an lm: new pieces)
    # the longest output in tokens, the end id included, whatever the input's length (Hugging Face's max_new_tokens,
    # or its max_length - 1); null: input length + max_extra_length and the model's max_length alone
    max_output_length: typing.Optional[int] = None
    end_at_limit: bool = False  # a hypothesis at its length limit ends with the end id (Hugging Face's forced_eos)
    max_beam_size: int = 8  # largest beam an export accepts (with XLA each size is a search of its own in it)
    precision: str = "float32"  # translate/evaluate of a run: "bfloat16" rounds the weights (decoding.weight_precision)
    shards: typing.Union[int, str] = "auto"  # translate/evaluate of a run: concurrent searches (decoding.sharding)
    # when a beam search is done with a sentence (decoding.stopping): "beam" once 2 * beam_size hypotheses have
    # ended (the fast rule), "exact" once none can still beat the n-best list, "transformers" (and _early, _never)
    # as Hugging Face's generate decides it
    stopping: str = "beam"
    # translate --alignments / --markup: the decoder layer (negative: from the last) whose cross-attention,
    # averaged over these heads (null: all), gives the word alignments (decoding.alignment)
    alignment_layer: int = -1  # measured: docs/results.md, "Word alignments and markup"
    alignment_heads: typing.Optional[typing.List[int]] = None
    alignment_rows: str = "predicts"  # a target piece's attention: of the step that outputs it, or that reads it

    def __post_init__(self):
        _check_positive("decoding", self, "beam_size", "max_extra_length", "max_beam_size", "max_output_length")
        if not isinstance(self.end_at_limit, bool):
            raise ConfigError(f"decoding.end_at_limit must be true or false. Received: {self.end_at_limit!r}")
        _check_alignment_choice(self.alignment_layer, self.alignment_heads)
        _check_choice("decoding", self, "alignment_rows", ALIGNMENT_ROWS)
        _check_choice("decoding", self, "precision", DECODING_PRECISIONS)
        _check_choice("decoding", self, "stopping", STOPPING_RULES)
        _check_choice("decoding", self, "length_penalty", LENGTH_PENALTIES)
        check_shards(self.shards, prefix="decoding.")
        if self.beam_size > self.max_beam_size:
            raise ConfigError(f"decoding.beam_size={self.beam_size} is larger than decoding.max_beam_size="
                              f"{self.max_beam_size}: raise max_beam_size or lower beam_size.")


def _check_alignment_choice(layer, heads):
    """The layer an integer, the heads null or a non-empty list of integers >= 0 (the model checks the ranges)."""
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ConfigError(f"decoding.alignment_layer must be an integer (a decoder layer; -1 is the last). "
                          f"Received: alignment_layer={layer!r}")
    if heads is not None and (not isinstance(heads, (list, tuple)) or not heads or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in heads)):
        raise ConfigError(f"decoding.alignment_heads must be null (all heads) or a non-empty list of head indices "
                          f"(integers >= 0). Received: alignment_heads={heads!r}")


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    decoding: DecodingConfig = dataclasses.field(default_factory=DecodingConfig)

    def __post_init__(self):
        expected = TASK_OF_ARCHITECTURE[self.model.architecture]
        if self.training.task not in (None, expected):
            raise ConfigError(
                f"training.task={self.training.task!r} does not match model.architecture="
                f"{self.model.architecture!r}, which trains task {expected!r}. Set training.task={expected} (or leave "
                f"it unset), or model.architecture="
                f"{ARCHITECTURE_OF_TASK[self.training.task]} for task {self.training.task}."
            )
        if self.training.eval_every_steps and self.task != "translation":
            raise ConfigError(
                f"training.eval_every_steps (dev BLEU and the best checkpoint) is for translation runs; this run "
                f"trains task {self.task!r}. Set training.eval_every_steps=0 and compare `t2t-keras evaluate` "
                "perplexities of its checkpoints instead."
            )
        if self.data.pipeline == "prepared" and self.task != "translation":
            raise ConfigError(
                f"data.pipeline=prepared is for translation runs for now; this run trains task {self.task!r}. Set "
                "data.pipeline=memory (or auto)."
            )
        _check_lora_rank(self.training.lora_rank, self.model)

    @property
    def task(self):
        """What the run trains: "translation", "lm" or "mlm" (`training.task`, or the architecture's)."""
        return self.training.task or TASK_OF_ARCHITECTURE[self.model.architecture]

    def to_dict(self):
        return dataclasses.asdict(self)


def _adapted_widths(model_config):
    """The widths that bound an adapter's rank: each adapted projection's `min(input, output)` dimension comes from
    these (attention maps d_model to h·d_k, h·d_k, h·d_v and back; the FFN d_model to d_ff and back)."""
    m = model_config
    return {"model.hidden_dim": m.hidden_dim,
            "model.num_heads * key_dim (the query and key projections)": m.num_heads * m.head_key_dim,
            "model.num_heads * value_dim (the value and output projections)": m.num_heads * m.head_value_dim,
            "model.intermediate_dim": m.intermediate_dim}


def _check_lora_rank(rank, model_config):
    """A rank above a projection's smaller dimension adds weights without adding rank: refused."""
    if rank is None:
        return
    name, width = min(_adapted_widths(model_config).items(), key=lambda item: item[1])
    if rank > width:
        raise ConfigError(f"training.lora_rank={rank} is larger than the smallest adapted projection, whose smaller "
                          f"dimension is {name}={width}: set training.lora_rank to at most {width}, or null to train "
                          "without adapters.")


SECTION_CLASSES = {"model": ModelConfig, "data": DataConfig, "training": TrainingConfig, "decoding": DecodingConfig}


def _unknown(kind, name, allowed):
    hint = difflib.get_close_matches(name, allowed, n=1)
    suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
    return ConfigError(f"Unknown {kind} {name!r}.{suggestion} Allowed: {', '.join(sorted(allowed))}.")


# Keys that were renamed: a run's saved config.yaml (and older config files) may still hold the old name.
RENAMED_KEYS = {("decoding", "extra_length"): "max_extra_length"}


def _section(name, values):
    cls = SECTION_CLASSES[name]
    for (section, old), new in RENAMED_KEYS.items():
        if section == name and old in values:
            if new in values:
                raise ConfigError(f"{section}.{old} and {section}.{new} are one setting (renamed {new}): give it once.")
            values = {new if key == old else key: value for key, value in values.items()}
    allowed = [field.name for field in dataclasses.fields(cls)]
    for key in values:
        if key not in allowed:
            raise _unknown(f"key in section '{name}'", key, allowed)
    return cls(**values)


def from_dict(data):
    """Builds a `Config` from nested dicts, rejecting unknown sections and keys."""
    data = dict(data or {})
    for name in data:
        if name not in SECTION_CLASSES:
            raise _unknown("config section", name, list(SECTION_CLASSES))
    sections = {name: dict(values or {}) for name, values in data.items()}
    model = sections.setdefault("model", {})
    if model.get("vocab_size") is None:
        model["vocab_size"] = sections.get("data", {}).get("vocab_size", DataConfig.vocab_size)
    return Config(**{name: _section(name, values) for name, values in sections.items()})


def available_presets():
    return sorted(path.stem for path in CONFIG_DIR.glob("*.yaml"))


def _resolve(name_or_path):
    path = pathlib.Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ConfigError(f"Config file {str(path)!r} does not exist.")
        return path
    preset = CONFIG_DIR / f"{name_or_path}.yaml"
    if not preset.exists():
        raise _unknown("preset", str(name_or_path), available_presets())
    return preset


def _read_yaml(path, seen=()):
    if path in seen:
        raise ConfigError(f"Config {path} extends itself through {' -> '.join(map(str, seen))}.")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"Config file {path} is not valid YAML: {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"Config file {path} must hold a mapping of sections, got {type(raw).__name__}.")
    if isinstance(raw.get("data"), dict):  # its file paths: relative to this file's folder where they are there
        raw["data"] = config_paths.in_folder(raw["data"], path.parent)
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    return _merge(_read_yaml(_resolve(parent), seen + (path,)), raw)


# Naming the corpus to read replaces an inherited mixture: `--config mini --set data.source=text --set
# data.train_files=[...]` trains on those files, not on mini's `data.sources`.
CORPUS_KEYS = ("source", "train_files", "dev_files", "test_files", "tfds_name")


def _merge(base, update):
    merged = {name: dict(values or {}) for name, values in base.items()}
    data = update.get("data") or {}
    if "sources" not in data and any(key in data for key in CORPUS_KEYS) and merged.get("data", {}).get("sources"):
        logger.info("data.%s is set, so the inherited data.sources mixture is dropped.",
                    next(key for key in CORPUS_KEYS if key in data))
        merged["data"]["sources"] = None
    for name, values in update.items():
        merged.setdefault(name, {}).update(values or {})
    return merged


def parse_override(text):
    """`section.key=value` -> {"section": {"key": value}}, the value parsed as YAML."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"Override {text!r} must look like section.key=value, e.g. model.hidden_dim=256.")
    dotted, value = text.split("=", 1)
    section, key = dotted.split(".", 1)
    return {section: {key: yaml.safe_load(value)}}


def load_config(name_or_path="base", overrides=()):
    """Loads a preset name or YAML file, applies `section.key=value` overrides, validates."""
    return _overridden(_read_yaml(_resolve(name_or_path)), overrides)


def with_overrides(config, overrides=()):
    """`config` with `section.key=value` overrides applied, validated."""
    return _overridden(config.to_dict(), overrides)


def _overridden(data, overrides):
    for text in overrides:
        data = _merge(data, parse_override(text))
    return from_dict(data)


def replace(config, **sections):
    """A copy of `config` with some fields changed: replace(cfg, model={"vocab_size": 8000})."""
    changed = {name: dataclasses.replace(getattr(config, name), **values) for name, values in sections.items()}
    return dataclasses.replace(config, **changed)
