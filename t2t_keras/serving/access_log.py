"""One JSON line per request to a model's endpoints (`t2t-keras serve --access-log [PATH]`).

    {"time": "2026-12-05T01:02:03.456Z", "method": "POST", "path": "/v1/models/default:predict",
     "model": "default", "signature": "serving_default", "status": 200, "sentences": 3,
     "latency_ms": 812.4, "queued_ms": 95.1}

A 503 adds `cause` (loading, overloaded, draining, deadline) and `retry_after` (seconds). The request's
sentences are written (`text`) only when asked (`--access-log-text`): a log of what users translate is theirs.
"""

import dataclasses
import datetime
import json
import sys
import time


@dataclasses.dataclass
class RequestRecord:
    """What is known of one request as it is answered; the handlers fill it in.

    Attributes:
        started: `time.monotonic()` at its arrival; `wall_time`: `time.time()` then.
        signature: the signature that answered it (or the endpoint: "attention", "metadata").
        sentences: sentences it held (0 until parsed).
        queued_seconds: how long it waited for its batch (None if it never queued).
        cause, retry_after: of a 503.
        text: its sentences, written only when the log is asked for them.
    """

    method: str
    path: str
    model: str
    signature: str
    started: float = dataclasses.field(default_factory=time.monotonic)
    wall_time: float = dataclasses.field(default_factory=time.time)
    status: int = None
    latency_seconds: float = None
    sentences: int = 0
    queued_seconds: float = None
    cause: str = None
    retry_after: int = None
    text: list = None

    def finish(self, status):
        """Answered with HTTP `status` now."""
        self.status = status
        self.latency_seconds = time.monotonic() - self.started


class AccessLog:
    """Writes a `RequestRecord` as one JSON line to `stream` (flushed at once).

    Args:
        stream: a text stream.
        include_text: also write the request's sentences.
    """

    def __init__(self, stream, include_text=False):
        self.stream = stream
        self.include_text = include_text

    def write(self, record):
        self.stream.write(json.dumps(log_line(record, self.include_text), ensure_ascii=False) + "\n")
        self.stream.flush()

    def close(self):
        if self.stream not in (sys.stdout, sys.stderr):
            self.stream.close()


def open_access_log(path, include_text=False):
    """An `AccessLog` appending to `path` ("-": standard error)."""
    stream = sys.stderr if path == "-" else open(path, "a", encoding="utf-8")
    return AccessLog(stream, include_text)


def log_line(record, include_text=False):
    """The JSON object of one request (see the module docstring)."""
    stamp = datetime.datetime.fromtimestamp(record.wall_time, datetime.timezone.utc)
    line = {"time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "method": record.method,
            "path": record.path, "model": record.model, "signature": record.signature, "status": record.status,
            "sentences": record.sentences, "latency_ms": _ms(record.latency_seconds),
            "queued_ms": _ms(record.queued_seconds)}
    if record.cause is not None:
        line.update(cause=record.cause, retry_after=record.retry_after)
    if include_text and record.text is not None:
        line["text"] = list(record.text)
    return line


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 1)
