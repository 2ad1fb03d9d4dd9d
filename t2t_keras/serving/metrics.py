"""The server's metrics in Prometheus' text format, written by `prometheus_client`, at TF Serving's path.

    GET /monitoring/prometheus/metrics

| metric | type | what it counts |
|---|---|---|
| `t2t_serving_requests_total{model, signature, code}` | counter | requests to a model's endpoints, by HTTP status |
| `t2t_serving_request_latency_seconds{model}` | histogram | from a request's arrival to its answer |
| `t2t_serving_sentences_translated_total` | counter | sentences the batches translated |
| `t2t_serving_batch_size_sentences` | histogram | sentences per model call |
| `t2t_serving_batch_seconds` | histogram | time of a model call |
| `t2t_serving_queued_seconds` | histogram | from a request's arrival in the queue to the start of its batch |
| `t2t_serving_queue_sentences` | gauge | sentences waiting or being translated (the queue's depth) |
| `t2t_serving_queue_limit_sentences` | gauge | the queue's bound now (`--max-queue-seconds` of work or `--max-queue`) |
| `t2t_serving_queue_throughput_sentences_per_second` | gauge | the measured throughput the bound and Retry-After use |
| `t2t_serving_waiting_their_turn` | gauge | refused requests keeping a place in the line for their retry |
| `t2t_serving_unavailable_total{cause}` | counter | 503 answers: loading, overloaded, draining, deadline |
| `t2t_serving_model_load_seconds{version}` | gauge | how long loading a model version took |
| `t2t_serving_model_info{version}` | info | the model version served |

Each `ServingMetrics` has a registry of its own, so two servers in one process (tests) do not share counts.
"""

import time

import prometheus_client

CAUSES = ("loading", "overloaded", "draining", "deadline")  # why a request was answered 503
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


class ServingMetrics:
    """The server's metrics; `exposition()` writes them in Prometheus' text format.

    Args:
        registry: a `prometheus_client.CollectorRegistry` to register in; None: a new one.
    """

    def __init__(self, registry=None):
        self.registry = prometheus_client.CollectorRegistry() if registry is None else registry
        metric = _Factory(self.registry)
        self.requests = metric(prometheus_client.Counter, "requests", "Requests to a model's endpoints, by model, "
                               "signature and HTTP status code.", ["model", "signature", "code"])
        self.latency = metric(prometheus_client.Histogram, "request_latency_seconds", "From a request's arrival to "
                              "its answer.", ["model"], buckets=LATENCY_BUCKETS)
        self.sentences = metric(prometheus_client.Counter, "sentences_translated", "Sentences the batches translated.")
        self.batch_size = metric(prometheus_client.Histogram, "batch_size_sentences", "Sentences per model call.",
                                 buckets=BATCH_BUCKETS)
        self.batch_seconds = metric(prometheus_client.Histogram, "batch_seconds", "Time of a model call.",
                                    buckets=LATENCY_BUCKETS)
        self.queued_seconds = metric(prometheus_client.Histogram, "queued_seconds", "From a request's arrival in "
                                     "the queue to the start of its batch.", buckets=LATENCY_BUCKETS)
        self.unavailable = metric(prometheus_client.Counter, "unavailable", "Requests answered 503, by cause: "
                                  "loading, overloaded, draining, deadline.", ["cause"])
        for cause in CAUSES:
            self.unavailable.labels(cause)  # listed at 0 from the start
        self.load_seconds = metric(prometheus_client.Gauge, "model_load_seconds", "How long loading a model version "
                                   "took.", ["version"])
        self.model = metric(prometheus_client.Info, "model", "The model version served.")
        self._queue_gauges = [metric(prometheus_client.Gauge, name, text) for name, text in (
            ("queue_sentences", "Sentences waiting or being translated."),
            ("queue_limit_sentences", "The queue's bound now, in sentences."),
            ("queue_throughput_sentences_per_second", "The measured throughput the bound and Retry-After use "
                                                      "(0 before the first batch)."),
            ("waiting_their_turn", "Refused requests keeping a place in the line for their retry."))]

    def track_queue(self, admission):
        """Reads the queue's gauges from `admission` (an `admission.Admission`) whenever the metrics are read."""
        depth, limit, throughput, line = self._queue_gauges
        depth.set_function(lambda: admission.held)
        limit.set_function(admission.limit)
        throughput.set_function(lambda: admission.throughput.per_second or 0.0)
        line.set_function(lambda: admission.line_length(time.monotonic()))

    def request_finished(self, model, signature, code, seconds, cause=None):
        """A request to a model's endpoint was answered with HTTP `code` after `seconds`; `cause` of a 503."""
        self.requests.labels(model, signature, str(code)).inc()
        self.latency.labels(model).observe(seconds)
        if cause is not None:
            self.unavailable.labels(cause).inc()

    def queued(self, seconds):
        """A request waited `seconds` in the queue before its batch started."""
        self.queued_seconds.observe(seconds)

    def batch_translated(self, num_sentences, seconds):
        self.sentences.inc(num_sentences)
        self.batch_size.observe(num_sentences)
        self.batch_seconds.observe(seconds)

    def model_loaded(self, version: str, seconds: float):
        """Model `version` was loaded in `seconds` and is served from now on."""
        self.load_seconds.labels(str(version)).set(seconds)
        self.model.info({"version": str(version)})

    def exposition(self):
        """The metrics in Prometheus' text format (bytes; media type `CONTENT_TYPE`)."""
        return prometheus_client.generate_latest(self.registry)


class _Factory:
    """Makes metrics named `t2t_serving_NAME` in one registry."""

    def __init__(self, registry):
        self.registry = registry

    def __call__(self, kind, name, documentation, labels=(), **options):
        return kind(f"t2t_serving_{name}", documentation, labels, registry=self.registry, **options)
