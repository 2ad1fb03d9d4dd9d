"""A stand-in for an export in the server's tests: cheap to import, so a `serve` process of it starts fast."""

import time

from t2t_keras.decoding.parameters import DecodingParams
from t2t_keras.export.loaded import TranslatorBase

HOLD_LIMIT_SECONDS = 60  # a batch never waits longer, whatever the test does


class StubTranslator(TranslatorBase):
    """Translates a sentence into itself upper-cased; each batch waits while the file `hold` exists."""

    def __init__(self, hold=None):
        self.path = None
        self.hold = hold
        self.defaults = DecodingParams(beam_size=1, alpha=0.6, max_extra_length=5)
        self.max_beam_size = 1
        self.max_source_length = 50

    def predict(self, sentences, params):
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while self.hold is not None and self.hold.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return {"translations": [[s.upper()] for s in sentences], "scores": [[-1.0] for _ in sentences],
                "truncated": [False] * len(sentences)}

    def signature_defs(self):
        return {}
