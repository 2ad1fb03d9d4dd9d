"""A crowd of honest clients against the server's admission on a virtual clock: a discrete-event simulation.

    python -m tests.serving_simulation --clients 1000            # bench-like requests, the server's defaults
    python -m tests.serving_simulation --clients 1000 --keys unique --seed 3

The server is modelled as `batcher.RequestBatcher` runs: one worker takes the accepted requests in order into
batches of at most `max_batch_size` sentences (a batch of n takes `batch_seconds + n * sentence_seconds`),
reports each batch's time to the admission (`Admission.measured`) and releases its sentences when it ends. What
is admitted, refused and told to come back when is decided by the real `admission.Admission`, given the virtual
time. Each client sends its requests one after the other; a request refused with 503 is sent again, the same,
after the Retry-After it was told, up to `max_attempts` times; a malformed one is answered at once (it never
reaches the queue). Every message takes a random network delay each way. Nothing sleeps: 1,000 clients and tens
of thousands of requests take seconds, and a seed gives the same run each time.

Request keys are those the server computes (`admission.request_key` of the client address, path and body):
`keys="bench"` sends the bodies of bench/bench_serving_load.py (1 to 3 of 20 sentences, 30% malformed) from one
address, so that many clients send the same body at once, as there; `keys="unique"` gives every request a body
of its own.
"""

import argparse
import dataclasses
import heapq
import itertools
import json
import random

from t2t_keras.serving.admission import Admission, Overloaded, request_key

PATH = "/v1/models/default:predict"
SENTENCE_COUNT = 20  # distinct sentences of the bench's valid requests


@dataclasses.dataclass
class Crowd:
    """What the simulated clients send, and the server they send it to (defaults: the bench's 1,000 clients
    against `serve`'s defaults on a model of ~300 sentences a second; the clients keep more than twice the queue's
    bound waiting)."""

    clients: int = 1000
    requests_per_client: int = 10
    max_sentences: int = 3  # each valid request has 1 to this many
    malformed_share: float = 0.3
    keys: str = "bench"  # or "unique"
    max_attempts: int = 30
    network_seconds: float = 0.005  # each way, drawn from [0, this]
    max_batch_size: int = 32
    batch_seconds: float = 0.025
    sentence_seconds: float = 0.0025
    max_queue_seconds: float = 2.0
    warm: bool = True  # the server has measured full batches before the crowd comes (as in the bench)
    seed: int = 0


@dataclasses.dataclass
class Outcome:
    client: int
    sentences: int
    status: int  # 200, or 503 for a request refused `max_attempts` times
    seconds: float  # from its first attempt to its answer
    retries: int


@dataclasses.dataclass
class _Request:
    client: int
    number: int
    sentences: int
    key: bytes
    first_sent: float
    retries: int = 0
    arrival: object = None


class Simulation:
    """Runs a `Crowd` against `admission` (default: an `Admission` with the crowd's settings, seeded)."""

    def __init__(self, crowd, admission=None):
        self.crowd = crowd
        self.rng = random.Random(crowd.seed)
        self.admission = admission or Admission(crowd.max_batch_size, max_queue_seconds=crowd.max_queue_seconds,
                                                rng=random.Random(crowd.seed + 1))
        if crowd.warm:
            full = crowd.max_batch_size
            self.admission.measured(full, crowd.batch_seconds + crowd.sentence_seconds * full)
        self.now = 0.0
        self.outcomes = []
        self.batches = 0
        self.busy_seconds = 0.0
        self._events = []
        self._order = itertools.count()
        self._queue = []  # accepted requests, in order
        self._working = False

    def run(self):
        """Simulates until every client has sent its requests; returns the valid requests' outcomes."""
        for client in range(self.crowd.clients):
            self._at(self.rng.uniform(0.0, 0.1), self._next_request, client, 0)
        while self._events:
            self.now, _, function, args = heapq.heappop(self._events)
            function(*args)
        return self.outcomes

    def _at(self, time, function, *args):
        heapq.heappush(self._events, (time, next(self._order), function, args))

    def _network(self):
        return self.rng.uniform(0.0, self.crowd.network_seconds)

    def _next_request(self, client, number):
        if number == self.crowd.requests_per_client:
            return
        if self.rng.random() < self.crowd.malformed_share:  # answered 400 at once, without reaching the queue
            self._at(self.now + 2 * self._network(), self._next_request, client, number + 1)
            return
        sentences = self.rng.randint(1, self.crowd.max_sentences)
        if self.crowd.keys == "bench":
            body = json.dumps({"instances": self.rng.sample(range(SENTENCE_COUNT), sentences)})
            key = request_key("127.0.0.1", PATH, "", body)
        else:
            key = request_key("127.0.0.1", PATH, "", f"{client} {number}")
        request = _Request(client, number, sentences, key, self.now)
        self._at(self.now + self._network(), self._arrive, request)

    def _arrive(self, request):
        request.arrival = self.admission.arrival(request.key, now=self.now)
        try:
            self.admission.admit(request.sentences, request.arrival, now=self.now)
        except Overloaded as refused:
            self._at(self.now + self._network(), self._refused, request, refused.retry_after)
            return
        self._queue.append(request)
        if not self._working:
            self._start_batch()

    def _refused(self, request, retry_after):
        if request.retries + 1 == self.crowd.max_attempts:
            self._answered(request, 503)
            return
        request.retries += 1
        self._at(self.now + retry_after + self._network(), self._arrive, request)

    def _start_batch(self):
        """The worker takes the oldest accepted request and those after it that fit, as the batcher does."""
        batch, size, rest = [], 0, []
        for request in self._queue:
            if not batch or size + request.sentences <= self.crowd.max_batch_size:
                batch.append(request)
                size += request.sentences
            else:
                rest.append(request)
        self._queue = rest
        self._working = True
        seconds = self.crowd.batch_seconds + self.crowd.sentence_seconds * size
        self._at(self.now + seconds, self._end_batch, batch, size, seconds)

    def _end_batch(self, batch, size, seconds):
        self.batches += 1
        self.busy_seconds += seconds
        self.admission.measured(size, seconds)
        for request in batch:
            self.admission.release(request.sentences)
            self._at(self.now + self._network(), self._answered, request, 200)
        self._working = False
        if self._queue:
            self._start_batch()

    def _answered(self, request, status):
        self.outcomes.append(Outcome(request.client, request.sentences, status, self.now - request.first_sent,
                                     request.retries))
        self._at(self.now, self._next_request, request.client, request.number + 1)


def percentile(values, share):
    values = sorted(values)
    return values[min(len(values) - 1, int(share * len(values)))]


def summary(simulation):
    """The figures the bench reports for a crowd, on the virtual clock."""
    outcomes = simulation.outcomes
    answered = [o for o in outcomes if o.status == 200]
    seconds = [o.seconds for o in answered]
    retries = [o.retries for o in outcomes]
    rate = simulation.admission.throughput.per_second
    elapsed = simulation.now
    return {"requests": len(outcomes), "gave_up": len(outcomes) - len(answered),
            "p50_s": round(percentile(seconds, 0.5), 3), "p99_s": round(percentile(seconds, 0.99), 3),
            "max_s": round(max(seconds), 3), "max_retries": max(retries), "p99_retries": percentile(retries, 0.99),
            "retries_histogram": dict(sorted(_counts(retries).items())),
            "drain_s": round(simulation.admission.limit() / rate, 3), "sentences_per_s": round(rate, 1),
            "busy_share": round(simulation.busy_seconds / elapsed, 3),
            "little_mean_s": round(simulation.crowd.clients * elapsed / len(outcomes), 3),
            "simulated_s": round(elapsed, 1)}


def _counts(values):
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Crowd):
        kind = (lambda text: text.lower() in ("1", "true", "yes")) if field.type is bool else field.type
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default)
    crowd = Crowd(**vars(parser.parse_args(argv)))
    simulation = Simulation(crowd)
    simulation.run()
    print(json.dumps(summary(simulation), indent=1))


if __name__ == "__main__":
    main()
