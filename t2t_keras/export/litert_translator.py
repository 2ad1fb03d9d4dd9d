"""Translating with a LiteRT export in the LiteRT interpreter (`ai-edge-litert`), behind the translators' interface.

    translator = LiteRTTranslator("exports/base.tflite", threads=2)
    translator.translate(["A sentence."], beam_size=4)

The interpreter is `ai_edge_litert.interpreter.InterpreterWithCustomOps`
with TF-Text's two SentencePiece ops registered
(`tensorflow_text.tflite_registrar`); every other op of the file is a
LiteRT builtin. Sentences go through the file's `translate` signature one
at a time (see `litert_module` for why); the parameters are checked here,
since the graph can only clamp them. The file returns the best translation only
(`num_return` 1) and has no forced-decoding signature.
"""

import json
import mmap
import os
import pathlib

import numpy as np

from t2t_keras.decoding.parameters import DecodingParams
from t2t_keras.errors import T2TError
from t2t_keras.export.litert_export import CUSTOM_OPS, METADATA_NAME
from t2t_keras.export.loaded import TranslatorBase, _checked_sentences

LITERT_VERSION = "2.3.0"  # the ai-edge-litert the package pins (setup.cfg)
REGISTRARS = {"TFText>FastSentencepieceTokenize": "AddFastSentencepieceTokenize",
              "TFText>FastSentencepieceDetokenize": "AddFastSentencepieceDetokenize"}


class LiteRTTranslator(TranslatorBase):
    """Translates lists of strings with a `.tflite` file written by `export_litert`.

    Args:
        path: the `.tflite` file.
        threads: CPU threads of the interpreter (None: one per CPU core).

    Attributes:
        defaults: the export's default `DecodingParams`.
        max_beam_size: largest beam size the file searches with.
        max_source_length: longest input in pieces; longer ones are cut and flagged.
        metadata: what the file records of itself (`litert_export`).
    """

    kind = "litert"
    signature_names = ("translate",)

    def __init__(self, path, threads=None):
        self.path = pathlib.Path(path)
        self.metadata = read_metadata(self.path)
        self.interpreter = load_interpreter(self.path, threads)
        self._translate = self.interpreter.get_signature_runner("translate")
        self.max_beam_size = int(self.metadata["max_beam_size"])
        self.max_length = int(self.metadata["max_length"])
        self.max_source_length = self.max_length - 1
        defaults = self.metadata["defaults"]
        self.defaults = DecodingParams(int(defaults["beam_size"]), float(defaults["alpha"]),
                                       int(defaults["max_extra_length"]))

    def predict(self, sentences, params=None):
        """The best translation of each sentence, as `SavedModelTranslator.predict` with `num_return` 1."""
        sentences = _checked_sentences(sentences)
        params = params or self.defaults
        if params.num_return != 1:
            raise T2TError(f"A LiteRT export returns the best translation only. Received: num_return="
                           f"{params.num_return}; use a SavedModel for n-best lists.")
        result = {"translations": [], "scores": [], "truncated": []}
        for sentence in sentences:
            out = self._translate(sentence=np.array([sentence.encode("utf-8")], dtype=object),
                                  beam_size=np.int32(params.beam_size), alpha=np.float32(params.alpha),
                                  max_extra_length=np.int32(params.max_extra_length))
            result["translations"].append([out["translation"][0].decode("utf-8", errors="replace")])
            result["scores"].append([float(out["score"][0])])
            result["truncated"].append(bool(out["truncated"][0]))
        return result

    def score_batch(self, sources, targets):
        raise T2TError(f"{self.path} is a LiteRT export, which holds no forced decoding: score with the run "
                       "directory or a SavedModel.")

    def signature_defs(self):
        """The file's signatures in TF Serving's metadata format."""
        def info(dtype, dims=()):
            return {"dtype": dtype, "tensor_shape": {"dim": [{"size": str(d)} for d in dims], "unknown_rank": False}}

        inputs = {"sentence": info("DT_STRING", [1]), "beam_size": info("DT_INT32"), "alpha": info("DT_FLOAT"),
                  "max_extra_length": info("DT_INT32")}
        outputs = {"translation": info("DT_STRING", [1]), "score": info("DT_FLOAT", [1]),
                   "truncated": info("DT_BOOL", [1])}
        return {"translate": {"inputs": inputs, "outputs": outputs, "method_name": "tensorflow/serving/predict"}}


def load_interpreter(path, threads=None):
    """The LiteRT interpreter of the file at `path`, with TF-Text's SentencePiece ops registered."""
    from tensorflow_text import tflite_registrar

    registrars = [getattr(tflite_registrar, REGISTRARS[name]) for name in CUSTOM_OPS]
    return import_litert().interpreter.InterpreterWithCustomOps(
        custom_op_registerers=registrars, model_path=str(path), num_threads=threads or os.cpu_count() or 1)


def import_litert():
    """The `ai_edge_litert` package (its interpreter and flatbuffer schema), or a T2TError saying how to install it."""
    try:
        import ai_edge_litert.interpreter
        import ai_edge_litert.schema_py_generated  # noqa: F401
    except ImportError:
        raise T2TError(f"Running a LiteRT export needs the LiteRT interpreter: pip install "
                       f"ai-edge-litert=={LITERT_VERSION} (or translate with the run directory or a SavedModel)."
                       ) from None
    return ai_edge_litert


def read_metadata(path):
    """The `t2t_keras` metadata entry of a LiteRT file, as a dict."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise T2TError(f"{path} is not a file: give the .tflite file `t2t-keras export --format litert` wrote.")
    schema = import_litert().schema_py_generated
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            model = schema.Model.GetRootAs(data, 0)
            entries = {model.Metadata(i).Name(): model.Metadata(i).Buffer() for i in range(model.MetadataLength())}
            buffer = entries.get(METADATA_NAME.encode("utf-8"))
            record = None if buffer is None else bytes(model.Buffers(buffer).DataAsNumpy())
    except Exception:  # noqa: BLE001 - whatever an empty file or one that is not a flatbuffer makes the reader raise
        record = None
    if record is None:
        raise T2TError(f"{path} is not a LiteRT export of t2t_keras (no '{METADATA_NAME}' metadata): write one with "
                       "t2t-keras export --format litert.")
    return json.loads(record.decode("utf-8"))
