"""Batching concurrent requests: a bounded queue and one worker that runs the model in a thread."""

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import time

from t2t_keras.errors import T2TError
from t2t_keras.serving.admission import Admission, Arrival, DeadlineExceeded, Overloaded  # noqa: F401 -- raised here
from t2t_keras.serving.metrics import ServingMetrics

logger = logging.getLogger(__name__)

SHUTTING_DOWN = "The server is shutting down: send the request again later."


class ShuttingDown(RuntimeError):
    """The batcher stopped before the request's batch ran."""


@dataclasses.dataclass
class _Job:
    sentences: list
    params: object  # hashable; only jobs with equal params share a batch
    future: asyncio.Future
    arrival: Arrival
    queued_at: float  # time.monotonic() when it was queued
    started: bool = False  # its batch is running: the deadline no longer applies


class RequestBatcher:
    """Groups concurrent requests with equal decoding parameters into one model call.

    A worker task takes the oldest waiting request, then collects more for up
    to `max_wait_ms` or until the batch holds `max_batch_size` sentences.
    Requests with other parameters, or that would overflow the batch, wait for
    a later batch in arrival order (a single request larger than
    `max_batch_size` forms a batch of its own). The batch runs in one worker
    thread, so the event loop keeps accepting requests meanwhile; those that
    arrive during a run make up the next batch.

    The queue is bounded in seconds of work (see `admission.Admission`): a
    request that would pass the bound is refused at once with `Overloaded`,
    whose `retry_after` is the measured drain time of the work ahead of it plus
    jitter; the refused request keeps its place in a line for its retry. A
    request larger than the bound is taken when nothing else is held. A
    request whose deadline (`Arrival.deadline`) passes while it is queued is
    answered `DeadlineExceeded` at once and never translated.

    Args:
        run_batch: `run_batch(sentences, params) -> dict` of per-sentence
            lists (or None), e.g. an artifact's `generate(...)._asdict()`.
        max_batch_size: most sentences per model call.
        max_wait_ms: how long the first request of a batch waits for company.
        max_queue: most sentences held at once; None: `max_queue_seconds` of work.
        max_queue_seconds, deadline_seconds: see `admission.Admission`.
        metrics: the `metrics.ServingMetrics` to report to (None: its own).
    """

    def __init__(self, run_batch, max_batch_size=32, max_wait_ms=10, max_queue=None, max_queue_seconds=None,
                 deadline_seconds=None, metrics=None):
        if max_batch_size < 1 or max_wait_ms < 0:
            raise T2TError("max_batch_size must be >= 1 and max_wait_ms >= 0. Received: "
                           f"max_batch_size={max_batch_size}, max_wait_ms={max_wait_ms}")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.admission = Admission(max_batch_size, max_queue, max_queue_seconds, deadline_seconds)
        self.metrics = ServingMetrics() if metrics is None else metrics
        self.metrics.track_queue(self.admission)
        self._queue = None
        self._waiting = collections.deque()  # jobs taken from the queue that did not fit a batch
        self._worker = None
        self._executor = None
        self._counts = collections.Counter()

    @property
    def max_queue(self):
        """The most sentences held at once, now (measured throughput times `max_queue_seconds`, or `max_queue`)."""
        return self.admission.limit()

    @property
    def running(self):
        return self._worker is not None and not self._worker.done()

    async def start(self):
        """Starts the worker task and thread (call from the serving event loop)."""
        self._queue = asyncio.Queue()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="t2t-batch")
        self._worker = asyncio.create_task(self._work())

    async def stop(self):
        """Stops the worker, fails the requests still waiting, and waits for a running batch to end."""
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        while self._queue is not None and not self._queue.empty():
            self._waiting.append(self._queue.get_nowait())
        _fail(self._waiting, ShuttingDown(SHUTTING_DOWN))
        self._waiting.clear()
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    async def run_in_thread(self, function, *args):
        """Runs `function(*args)` in the model thread (e.g. a warm-up call), between batches."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def submit(self, sentences, params, arrival=None):
        """The model's per-sentence results for `sentences`, computed in some batch.

        `arrival`: the request's key and deadline (`admission.Arrival`); its
        `queued_seconds` is set when its batch starts. Raises `Overloaded` when
        the queue has no room for it, `DeadlineExceeded` when its deadline
        passes before its batch starts.
        """
        if self._worker is None:
            raise RuntimeError("The batcher is not running: start() it first.")
        if not self.running:
            raise ShuttingDown(SHUTTING_DOWN)
        arrival = arrival or Arrival()
        with self.holding(len(sentences), arrival):
            loop = asyncio.get_running_loop()
            job = _Job(list(sentences), params, loop.create_future(), arrival, time.monotonic())
            timer = None
            if arrival.deadline is not None:
                timer = loop.call_later(max(0.0, arrival.deadline - time.monotonic()), self._expire, job)
            self._queue.put_nowait(job)
            try:
                return await job.future
            finally:
                if timer is not None:
                    timer.cancel()

    @contextlib.contextmanager
    def holding(self, num_sentences, arrival=None):
        """Counts `num_sentences` against the queue's bound while the block runs; raises `Overloaded` past it.

        `submit` holds its sentences so; a request that runs in the model
        thread by itself (`run_in_thread`) holds its own around that call.
        """
        self.admission.admit(num_sentences, arrival)
        try:
            yield
        finally:
            self.admission.release(num_sentences)

    def stats(self):
        """Counters: requests, sentences, batches, batched_requests (shared a batch), largest batch, rejected
        requests and sentences (refused at once), rejected_deadline, expired_requests (their deadline passed while
        queued); gauges: queued_sentences (held now), max_queue (the bound now), waiting_their_turn (refused
        requests keeping a place), sentences_per_second (measured)."""
        return dict(self._counts, **self.admission.stats())

    async def _work(self):
        while True:
            batch = await self._next_batch()
            await self._run(batch)

    async def _next_batch(self):
        """Jobs with the parameters of the oldest waiting job, within the size and wait limits.

        Jobs already waiting (those that arrived during the previous batch)
        join at once; then the batch waits up to `max_wait` for more.
        """
        first = None
        while first is None or first.future.done():  # answered meanwhile: its deadline passed
            first = self._waiting.popleft() if self._waiting else await self._queue.get()
        batch = [first]
        for job in list(self._waiting):
            if self._fits(batch, job):
                self._waiting.remove(job)
                batch.append(job)
        while self._size(batch) < self.max_batch_size and not self._queue.empty():
            self._offer(batch, self._queue.get_nowait())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while self._size(batch) < self.max_batch_size and (remaining := deadline - loop.time()) > 0:
            try:
                job = await asyncio.wait_for(self._queue.get(), remaining)
            except asyncio.TimeoutError:
                break
            self._offer(batch, job)
        return batch

    def _fits(self, batch, job):
        return job.params == batch[0].params and self._size(batch) + len(job.sentences) <= self.max_batch_size

    def _offer(self, batch, job):
        """Adds `job` to `batch` if it fits, else keeps it, in order, for a later batch."""
        if job.future.done():
            return
        if self._fits(batch, job):
            batch.append(job)
        else:
            self._waiting.append(job)

    @staticmethod
    def _size(batch):
        return sum(len(job.sentences) for job in batch)

    async def _run(self, batch):
        """One model call for the whole batch; each job gets its slice of the results (or the error)."""
        start = time.monotonic()
        for job in batch:
            if job.arrival.deadline is not None and job.arrival.deadline <= start:
                self._expire(job)
        batch = [job for job in batch if not job.future.done()]  # cancelled (the client went away) or expired
        if not batch:
            return
        for job in batch:
            job.started = True
            job.arrival.queued_seconds = start - job.queued_at
            self.metrics.queued(job.arrival.queued_seconds)
        sentences = [s for job in batch for s in job.sentences]
        self._count(batch, len(sentences))
        try:
            results = await self.run_in_thread(self.run_batch, sentences, batch[0].params)
        except asyncio.CancelledError:
            _fail(batch, ShuttingDown(SHUTTING_DOWN))
            raise
        except Exception as error:  # noqa: BLE001 -- handed to every waiting request
            logger.exception("A batch of %d sentences failed.", len(sentences))
            _fail(batch, error)
            return
        seconds = time.monotonic() - start
        self.admission.measured(len(sentences), seconds)
        self.metrics.batch_translated(len(sentences), seconds)
        start = 0
        for job in batch:
            end = start + len(job.sentences)
            if not job.future.done():
                job.future.set_result({name: None if values is None else values[start:end]
                                       for name, values in results.items()})
            start = end

    def _expire(self, job):
        """Answers a job whose deadline passed before its batch started with `DeadlineExceeded`."""
        if job.started or job.future.done():
            return
        self._counts["expired_requests"] += 1
        retry_after = self.admission.retry_after(self.admission.drain_seconds(self.admission.held))
        job.future.set_exception(DeadlineExceeded(
            f"The request waited {time.monotonic() - job.queued_at:.1f} s in the queue, past its deadline, and was "
            f"not translated: send it again in {retry_after} s, or with a longer timeout.", retry_after))

    def _count(self, batch, num_sentences):
        counts = self._counts
        counts["batches"] += 1
        counts["requests"] += len(batch)
        counts["sentences"] += num_sentences
        if len(batch) > 1:
            counts["batched_requests"] += len(batch)
        counts["largest_batch_requests"] = max(counts["largest_batch_requests"], len(batch))
        counts["largest_batch_sentences"] = max(counts["largest_batch_sentences"], num_sentences)


def _fail(jobs, error):
    """Hands `error` to every job still waiting for its answer."""
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)
