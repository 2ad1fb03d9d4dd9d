"""A LiteRT export as an artifact: the whole translator in one `.tflite` file, run by the LiteRT interpreter.

    artifact = LiteRTArtifact("exports/base.tflite", threads=2)
    artifact.generate(["A sentence."], artifact.request(beam_size=4))

The interpreter is `ai_edge_litert.interpreter.InterpreterWithCustomOps`
with TF-Text's two SentencePiece ops registered
(`tensorflow_text.tflite_registrar`); every other op of the file is a
LiteRT builtin. Sentences go through the file's `translate` signature one
at a time (see `export.litert_module` for why); the request is checked here,
since the graph can only clamp its values. The file returns the best translation only
and holds no forced decoding: it generates, and does not score.
"""

import contextlib
import json
import mmap
import pathlib

import numpy as np

from t2t_keras.artifacts.base import Artifact, in_chunks
from t2t_keras.artifacts.signatures import described
from t2t_keras.decoding.request import Generation, GenerationRequest, check_lines
from t2t_keras.errors import T2TError
from t2t_keras.export.litert_export import CUSTOM_OPS, METADATA_NAME
from t2t_keras.hardware import Hardware
from t2t_keras.quiet_start import info_hidden, native_lines_dropped

LITERT_VERSION = "2.3.0"  # the ai-edge-litert the package pins (setup.cfg)
REGISTRARS = {"TFText>FastSentencepieceTokenize": "AddFastSentencepieceTokenize",
              "TFText>FastSentencepieceDetokenize": "AddFastSentencepieceDetokenize"}
ACCEPTS = frozenset({"beam_size", "alpha", "max_extra_length"})
LITERT_INFO_LINES = ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",)  # the first call's


class LiteRTArtifact(Artifact):
    """A `.tflite` file written by `export_litert` (see the module docstring).

    Args:
        path: the `.tflite` file.
        threads: CPU threads of the interpreter (None: one per CPU core).

    Attributes:
        metadata: what the file records of itself (`export.litert_export`).
    """

    kind = "litert"
    task = "translation"
    accepts = ACCEPTS
    signature_names = ("translate",)

    def __init__(self, path, threads=None):
        self.path = pathlib.Path(path)
        self.metadata = read_metadata(self.path)
        self.interpreter = load_interpreter(self.path, threads)
        self._translate = self.interpreter.get_signature_runner("translate")
        self._called = False
        self.max_beam_size, self.max_length = int(self.metadata["max_beam_size"]), int(self.metadata["max_length"])
        defaults = self.metadata["defaults"]
        self.defaults = GenerationRequest(int(defaults["beam_size"]), float(defaults["alpha"]),
                                          self.metadata.get("length_penalty", "gnmt"),
                                          int(defaults["max_extra_length"]), self.metadata.get("stopping", "beam"),
                                          max_output_length=self.metadata.get("max_output_length"),
                                          end_at_limit=bool(self.metadata.get("end_at_limit", False)))

    def generate(self, lines, request):
        """The `Generation` of `lines` under `request` (`self.request(...)`), one sentence a call."""
        lines, request = check_lines(lines), self.check_request(request)
        return in_chunks(lines, 1, 1, lambda chunk: self._one(chunk[0], request))

    def _one(self, sentence, request):
        with self._first_call():
            out = self._translate(sentence=np.array([sentence.encode("utf-8")], dtype=object),
                                  beam_size=np.int32(request.beam_size), alpha=np.float32(request.alpha),
                                  max_extra_length=np.int32(request.max_extra_length))
        return Generation([[out["translation"][0].decode("utf-8", errors="replace")]], [[float(out["score"][0])]],
                          [bool(out["truncated"][0])], None, [None])

    def _first_call(self):
        """Around the interpreter's first call, which logs its INFO line on the XNNPACK delegate: dropped while
        TensorFlow's INFO lines are hidden (`quiet_start`), kept with `--verbose`."""
        if self._called or not info_hidden():
            return contextlib.nullcontext()
        self._called = True
        return native_lines_dropped(LITERT_INFO_LINES)

    def signature_defs(self):
        """The file's signature in TF Serving's metadata format."""
        return described("translate", {"sentence": ("DT_STRING", [1]), "beam_size": ("DT_INT32", []),
                                       "alpha": ("DT_FLOAT", []), "max_extra_length": ("DT_INT32", [])},
                         {"translation": ("DT_STRING", [1]), "score": ("DT_FLOAT", [1]),
                          "truncated": ("DT_BOOL", [1])})


def load_interpreter(path, threads=None):
    """The LiteRT interpreter of the file at `path`, with TF-Text's SentencePiece ops registered, on `threads` (None:
    every core the process may run on; LiteRT computes on the CPU whatever accelerators there are)."""
    from tensorflow_text import tflite_registrar

    registrars = [getattr(tflite_registrar, REGISTRARS[name]) for name in CUSTOM_OPS]
    threads = threads or Hardware.detect(before_tensorflow=True).cores
    return import_litert().interpreter.InterpreterWithCustomOps(
        custom_op_registerers=registrars, model_path=str(path), num_threads=threads)


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
