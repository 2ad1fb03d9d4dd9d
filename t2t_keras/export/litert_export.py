"""Writing a translation run as one LiteRT `.tflite` file, atomically: strings in, translations out.

    export_litert_run("runs/base", "exports/base.tflite", quantization="int8")
    artifact = open_artifact("exports/base.tflite")            # artifacts.litert

The file holds the SentencePiece tokenizer, the encoder, the preallocated
key/value cache and the greedy and beam searches (`export.litert_module`),
and a metadata entry `t2t_keras` (JSON: the model's length limit, the
decoding defaults, the largest beam, the tokenizer, the quantization and
which weights of the run it holds). Its ops are LiteRT builtins and the two
TF-Text SentencePiece ops (`CUSTOM_OPS`); anything else the converter
would leave in the file (a Flex op) is an error, so the LiteRT interpreter
from PyPI runs every file this writes.

`quantization="int8"` is the converter's dynamic-range quantization: the
weights of the matrix products are stored in int8 (one scale per output
channel) and the activations quantized on the fly; the rest stays float32. A model of bfloat16 weights (a run
imported with `--precision bfloat16`) is widened to float32 first, exactly: the file's kernels compute in float32.

Refused before anything is written, with the alternative: an lm or mlm run
(a SavedModel holds an lm; an mlm generates nothing), a WordPiece run, a
model whose weights do not fit the flatbuffer's 2 GB, an unknown
quantization. The file is converted in memory and written through a
temporary file, so a failure leaves no partial file.
"""

import json
import logging
import math
import pathlib
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

from t2t_keras.data.tokenizer import check_vocab_size
from t2t_keras.decoding.request import DEFAULTS, GenerationRequest
from t2t_keras.decoding.weight_precision import in_precision
from t2t_keras.errors import T2TError
from t2t_keras.export.litert_module import LiteRTModule
from t2t_keras.export.litert_tokenizer import check_litert_tokenizer
from t2t_keras.export.translator_module import MAX_BEAM_SIZE
from t2t_keras.files import check_can_write, write_bytes_atomic

logger = logging.getLogger(__name__)

LITERT_QUANTIZATIONS = ("float32", "int8")
METADATA_NAME = "t2t_keras"  # the flatbuffer metadata entry that describes the export
CUSTOM_OPS = ("TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize")
MAX_FLATBUFFER_BYTES = 2**31 - 1  # a FlatBuffer addresses at most 2 GB
HEADROOM = 1.05  # the graph and tokenizer beside the weights; measured at well under 1 MB


def export_litert_run(run_dir, out_path, quantization="float32", average_last=None, source="auto", overwrite=False,
                      request=None, max_beam_size=None):
    """Converts the trained model of a translation run, with its tokenizer, to a LiteRT file.

    Args:
        run_dir: a translation run directory.
        out_path: the `.tflite` file to write.
        quantization: "float32" (default) or "int8" (dynamic-range int8 weights).
        average_last, source: which weights (`runs.weights_to_export`).
        overwrite: replace an existing file.
        request: the default `GenerationRequest` the file records; None takes the run config's `decoding` section.
        max_beam_size: largest beam size `translate` accepts; None takes `decoding.max_beam_size`.

    Returns:
        the file, a `pathlib.Path`.
    """
    from t2t_keras.runs import open_run, weights_to_export

    run = open_run(run_dir)
    config = run.load_config()
    check_litert_task(config.task, run_dir)
    check_quantization(quantization)
    check_can_write(pathlib.Path(out_path), overwrite)
    tokenizer = run.load_tokenizer()
    check_litert_tokenizer(tokenizer)  # before the weights are loaded or averaged
    model, weights = weights_to_export(run, source, average_last)
    request = request or GenerationRequest.from_config(config.decoding)
    max_beam_size = config.decoding.max_beam_size if max_beam_size is None else max_beam_size
    return export_litert(model, tokenizer, out_path, quantization, request, max_beam_size, overwrite, weights)


def export_litert(model, tokenizer, out_path, quantization="float32", request=DEFAULTS, max_beam_size=MAX_BEAM_SIZE,
                  overwrite=False, weights=None):
    """Writes `model` and `tokenizer` as one LiteRT file at `out_path` (see the module docstring).

    Raises:
        T2TError: a tokenizer, quantization or model size the file cannot hold.
        FileExistsError: `out_path` exists and `overwrite` is False.
    """
    out_path = pathlib.Path(out_path)
    check_quantization(quantization)
    check_can_write(out_path, overwrite)
    check_litert_tokenizer(tokenizer)
    check_vocab_size(tokenizer.vocab_size, model.vocab_size)
    check_size(model, quantization)
    module = LiteRTModule(in_precision(model, "float32"), tokenizer, max_beam_size, request)
    metadata = {"format": 1, "task": "translation", "max_length": int(model.max_length),
                "max_beam_size": int(max_beam_size), "length_penalty": request.length_penalty,
                "stopping": request.stopping, "max_output_length": request.max_output_length,
                "end_at_limit": request.end_at_limit,
                "defaults": {"beam_size": request.beam_size, "alpha": request.alpha,
                             "max_extra_length": request.max_extra_length},
                "tokenizer": tokenizer.kind, "vocab_size": int(tokenizer.vocab_size), "quantization": quantization,
                "custom_ops": list(CUSTOM_OPS), "weights": weights}
    flatbuffer = convert(module, quantization, json.dumps(metadata, sort_keys=True).encode("utf-8"))
    if len(flatbuffer) > MAX_FLATBUFFER_BYTES:
        raise _too_large(len(flatbuffer), quantization)
    write_bytes_atomic(out_path, flatbuffer)
    logger.info("Exported a LiteRT model (%s, %.1f MB) to %s", quantization, len(flatbuffer) / 1e6, out_path)
    return out_path


def check_litert_task(task, where):
    """Raises T2TError unless `task` is translation, naming the export that holds the other tasks."""
    if task == "translation":
        return
    alternative = ("export it as a SavedModel (the default --format), which holds its sampler" if task == "lm" else
                   "a masked language model generates nothing to export; score it with t2t-keras evaluate")
    raise T2TError(f"{where} trains task {task!r}: a LiteRT export holds an encoder-decoder translation model "
                   f"with its beam search; {alternative}.")


def check_quantization(quantization):
    if quantization not in LITERT_QUANTIZATIONS:
        raise T2TError(f"A LiteRT export takes --quantization float32 or int8 (dynamic-range int8 weights). "
                       f"Received: quantization={quantization!r}")


def check_size(model, quantization):
    """Refuses a model whose weights (float32 in the file, whatever the model's; int8: a quarter, roughly) cannot fit
    one flatbuffer."""
    weight_bytes = 4 * sum(math.prod(v.shape) for v in model.variables)
    estimate = weight_bytes * (0.25 if quantization == "int8" else 1.0) * HEADROOM
    if estimate > MAX_FLATBUFFER_BYTES:
        raise _too_large(estimate, quantization)


def _too_large(size, quantization):
    advice = ("export --quantization int8 (about a quarter of the size), or " if quantization == "float32" else "")
    return T2TError(f"A LiteRT file is one FlatBuffer, which holds at most 2 GB, and this model needs about "
                    f"{size / 2**30:.2f} GB ({quantization}): {advice}export a SavedModel or a CTranslate2 model "
                    "(--format saved_model or ctranslate2), which have no such limit.")


def convert(module, quantization, metadata):
    """The flatbuffer of `module`'s signatures, with `metadata` (bytes) as the entry `METADATA_NAME`.

    Builtin ops and the TF-Text ops only: a Flex op fails the conversion, any other custom op is refused.
    """
    with tempfile.TemporaryDirectory(prefix="t2t-keras-litert-") as saved:
        signatures = module.signatures()
        tf.saved_model.save(module, saved, signatures=signatures)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=list(signatures))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no Flex: LiteRT cannot run it
        converter.allow_custom_ops = True  # the TF-Text ops; any other custom op is refused below
        if quantization == "int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative data: dynamic range
        model = flatbuffer_utils.convert_bytearray_to_object(converter.convert())
    unexpected = sorted(set(custom_ops(model)) - set(CUSTOM_OPS))
    if unexpected:
        raise T2TError(f"The converted model holds ops the LiteRT interpreter cannot run: {unexpected}. "
                       "Export a SavedModel instead (--format saved_model).")
    add_metadata(model, METADATA_NAME, metadata)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def custom_ops(model):
    """The custom op names a flatbuffer model (`schema_py_generated.ModelT`) uses."""
    return [code.customCode.decode("utf-8") for code in model.operatorCodes if code.customCode]


def add_metadata(model, name, data):
    """Adds a metadata entry `name` holding the bytes `data` to a `ModelT`."""
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(data, np.uint8)
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = name
    entry.buffer = len(model.buffers) - 1
    model.metadata = (model.metadata or []) + [entry]
