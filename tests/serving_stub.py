"""A stand-in for an export in the server's tests: an artifact whose batches can be held, so that what is queued,
in flight or refused can be seen, and whose speed the test sets."""

import time

from t2t_keras.artifacts.base import Artifact
from t2t_keras.decoding.request import Generation, GenerationRequest

HOLD_LIMIT_SECONDS = 60  # a batch never waits longer, whatever the test does


class StubTranslator(Artifact):
    """Translates a sentence into itself upper-cased; each batch waits while the file `hold` exists.

    A batch of n sentences takes `batch_seconds + n * sentence_seconds` (0 by default), and is recorded in
    `batches` (its sentences).
    """

    kind, task = "saved_model", "translation"
    accepts = frozenset({"beam_size", "alpha", "max_extra_length", "num_return"})
    signature_names = ("serving_default", "translate")

    def __init__(self, hold=None, batch_seconds=0.0, sentence_seconds=0.0):
        self.path = None
        self.hold = hold
        self.batch_seconds, self.sentence_seconds = batch_seconds, sentence_seconds
        self.batches = []
        self.defaults = GenerationRequest(beam_size=1, alpha=0.6, max_extra_length=5)
        self.max_beam_size, self.max_length = 1, 51

    def generate(self, lines, request):
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while self.hold is not None and self.hold.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(self.batch_seconds + self.sentence_seconds * len(lines))
        self.batches.append(list(lines))
        return Generation([[s.upper()] for s in lines], [[-1.0] for _ in lines], [False] * len(lines), None,
                          [None] * len(lines))

    def signature_defs(self):
        return {}
