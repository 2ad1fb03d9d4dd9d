"""One way to open what t2t-keras makes, and one interface whatever it is.

    artifact = open_artifact("runs/base")      # a run directory, a SavedModel, a CTranslate2 directory, a .tflite
    artifact.task, artifact.kind               # "translation" | "lm" | "mlm";  "run" | "saved_model" | ...
    request = artifact.request(beam_size=2)    # its defaults and the given fields, checked against `accepts`
    artifact.generate(lines, request)          # a `decoding.request.Generation`: translations or continuations
    artifact.score(pairs)                      # forced decoding, where `"score" in artifact.operations`

One file a kind: `run` (`RunArtifact`), `saved_model`, `ctranslate2`, `litert`; what they share is `base`.
"""

from t2t_keras.artifacts.opening import open_artifact

__all__ = ["open_artifact"]
