"""The peak memory of a training step, estimated from the config alone (no TensorFlow).

`t2t-keras describe` prints it; `train` compares it with the machine's memory before its first step and splits
each batch into micro-batches when it does not fit (training/memory_fit.py). In bytes, for one micro-batch of
`rows` sequences padded to `length` (the largest bucket: data.max_length) on each side:

    weights      every parameter in float32 (mixed precision keeps float32 master weights), and under mixed
                 precision their 16-bit copies cast for the step
    gradients    a float32 gradient of each trained parameter; two with accumulation (the running sum)
    optimizer    Adam's two float32 moments of each trained parameter
    activations  what the backward pass keeps of every layer, per token, at the compute precision: about
                 ENCODER_WIDTHS x d_model + FEED_FORWARD_WIDTHS x d_ff in an encoder layer, DECODER_WIDTHS x
                 d_model + FEED_FORWARD_WIDTHS x d_ff in a decoder layer (inputs of every projection, the
                 attention contexts, dropout masks, residual sums, LayerNorm inputs), times ACTIVATION_SCALE
    logits       tokens x vocabulary, often the largest single tensor: the float32 logits, the loss' float32
                 gradient of them, and under mixed precision the 16-bit logits (LOGIT_COPIES)
    attention    rows x heads x length² per attention layer (encoder self, decoder self and cross): the scores
                 and the probabilities (ATTENTION_COPIES) at the compute precision
    runtime      the process before the model: Python, TensorFlow, the corpus and its input pipeline, compiled
                 programs and their buffers

In a CPU's memory (`runtime=True`) activations and attention count at float32's 4 bytes whatever the precision:
a mixed_bfloat16 step under XLA kept about what the float32 one did (base, 8,192 tokens: 10.86 GB against 10.67).
The constants are calibrated on the peak RSS measured for `mini`, `small` and `base` in float32 and
mixed_bfloat16 (docs/results.md, "A model too big for memory", bench/bench_memory_estimate.py): the estimate was
1.00 to 1.42 times the measured peak, never below it.
"""

import dataclasses
import math

from t2t_keras.params import adapter_parameters, count_parameters

GB = 1e9
FLOAT32 = 4
# Structural counts of the values an encoder / decoder layer keeps per token, in widths of d_model and d_ff.
ENCODER_WIDTHS, DECODER_WIDTHS, FEED_FORWARD_WIDTHS = 14, 24, 2
# Calibrated on the measurements (docs/results.md): see the module docstring.
ACTIVATION_SCALE = 1.0
LOGIT_COPIES = {"float32": 2, "mixed": 3}
ATTENTION_COPIES = 2
RUNTIME_BYTES = 1.6 * GB
PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "attention", "runtime")


def compute_bytes(precision):
    """Bytes of one activation value: 2 under mixed precision (bfloat16, float16), 4 in float32."""
    return FLOAT32 if precision == "float32" else 2


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """The parts of a training step's peak memory (bytes, `PARTS`), and the micro-batch they are for."""

    parts: dict
    rows: int  # sequences per micro-batch (of the largest bucket)
    length: int  # their padded length
    precision: str

    @property
    def total(self):
        return sum(self.parts.values())

    def describe(self):
        """`12.3 GB (weights 0.30, gradients 0.30, ... GB)`."""
        return f"{self.total / GB:.1f} GB ({format_parts(self.parts)} GB)"


def format_parts(parts):
    """`weights 0.30, gradients 0.30, ...`: the non-zero parts of an estimate, in GB."""
    return ", ".join(f"{name} {value / GB:.2f}" for name, value in parts.items() if value)


def trained_parameters(model_config, lora_rank=None):
    """`(all parameters, trained ones)`: with adapters (training.lora_rank) only they train."""
    total = count_parameters(model_config)["total"]
    if lora_rank is None:
        return total, total
    adapters = adapter_parameters(model_config, lora_rank)
    return total + adapters, adapters


def activation_widths(model_config):
    """Values kept per source/target token by all layers together (the activations' count, not yet in bytes)."""
    m = model_config
    encoder = ENCODER_WIDTHS * m.hidden_dim + FEED_FORWARD_WIDTHS * m.intermediate_dim
    decoder = DECODER_WIDTHS * m.hidden_dim + FEED_FORWARD_WIDTHS * m.intermediate_dim
    if m.architecture == "encoder_decoder":
        return m.num_layers * encoder + m.decoder_layers * decoder
    return m.num_layers * encoder  # one stack of self-attention blocks


def attention_layers(model_config):
    """Attention matrices of one step: encoder self, decoder self and cross attention (one stack alone)."""
    m = model_config
    return m.num_layers + 2 * m.decoder_layers if m.architecture == "encoder_decoder" else m.num_layers


def estimate(model_config, precision, rows, length, lora_rank=None, accumulating=False, copies=1,
             runtime=True):
    """The `MemoryEstimate` of a step on `rows` sequences of `length` tokens (a side).

    Args:
        model_config: a `ModelConfig`.
        precision: a resolved training.mixed_precision: float32, mixed_bfloat16 or mixed_float16.
        rows, length: the micro-batch (the largest bucket's).
        lora_rank: training.lora_rank (only the adapters train), or None.
        accumulating: the step accumulates gradients over micro-batches (a second gradient buffer).
        copies: copies of the weights, gradients and optimizer state in the memory compared (replicas on logical
            devices of one CPU each hold their own).
        runtime: the memory is a CPU's: count the process' own memory (`RUNTIME_BYTES`) and the activations at
            float32's size (not on a GPU's memory).
    """
    m, act = model_config, compute_bytes(precision)
    kept = FLOAT32 if runtime else act  # bytes of an activation kept for the backward pass: see the module docstring
    total, trained = trained_parameters(m, lora_rank)
    tokens = rows * length
    weights = total * FLOAT32 + (total * act if precision != "float32" else 0)
    parts = {
        "weights": copies * weights,
        "gradients": copies * trained * FLOAT32 * (2 if accumulating else 1),
        "optimizer": copies * trained * FLOAT32 * 2,
        "activations": ACTIVATION_SCALE * tokens * activation_widths(m) * kept,
        "logits": LOGIT_COPIES["float32" if precision == "float32" else "mixed"] * tokens * m.vocab_size * FLOAT32,
        "attention": ATTENTION_COPIES * rows * m.num_heads * length ** 2 * attention_layers(m) * kept,
        "runtime": RUNTIME_BYTES if runtime else 0,
    }
    return MemoryEstimate({name: int(math.ceil(parts[name])) for name in PARTS}, rows, length, precision)
