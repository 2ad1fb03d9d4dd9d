"""Batching concurrent requests: a bounded queue and one worker that runs the model in a thread."""

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import math
import time

from t2t_keras.errors import T2TError

logger = logging.getLogger(__name__)

SHUTTING_DOWN = "The server is shutting down: send the request again later."
QUEUED_BATCHES = 4  # the default max_queue: four full batches, one running and three waiting
RECENT_WEIGHT = 0.2  # weight of the newest batch in the running mean of batch times (Retry-After)


class Overloaded(Exception):
    """The server holds `max_queue` sentences already; `retry_after`: seconds until it has room, estimated."""

    def __init__(self, message, retry_after):
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The batcher stopped before the request's batch ran."""


@dataclasses.dataclass
class _Job:
    sentences: list
    params: object  # hashable; only jobs with equal params share a batch
    future: asyncio.Future


class RequestBatcher:
    """Groups concurrent requests with equal decoding parameters into one model call.

    A worker task takes the oldest waiting request, then collects more for up
    to `max_wait_ms` or until the batch holds `max_batch_size` sentences.
    Requests with other parameters, or that would overflow the batch, wait for
    a later batch in arrival order (a single request larger than
    `max_batch_size` forms a batch of its own). The batch runs in one worker
    thread, so the event loop keeps accepting requests meanwhile; those that
    arrive during a run make up the next batch.

    The queue is bounded: the server holds at most `max_queue` sentences at
    once, waiting or being translated. A request that would pass the bound is
    refused at once with `Overloaded`, whose `retry_after` is the time the
    batches held take at the recent batch time; a request larger than the
    bound is taken when nothing else is held.

    Args:
        run_batch: `run_batch(sentences, params) -> dict` of per-sentence
            lists (or None), e.g. an artifact's `generate(...)._asdict()`.
        max_batch_size: most sentences per model call.
        max_wait_ms: how long the first request of a batch waits for company.
        max_queue: most sentences held at once; None: `QUEUED_BATCHES` full batches.
    """

    def __init__(self, run_batch, max_batch_size=32, max_wait_ms=10, max_queue=None):
        max_queue = QUEUED_BATCHES * max_batch_size if max_queue is None else max_queue
        if max_batch_size < 1 or max_wait_ms < 0 or max_queue < 1:
            raise T2TError("max_batch_size and max_queue (sentences) must be >= 1 and max_wait_ms >= 0. Received: "
                           f"max_batch_size={max_batch_size}, max_wait_ms={max_wait_ms}, max_queue={max_queue}")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self._queue = None
        self._waiting = collections.deque()  # jobs taken from the queue that did not fit a batch
        self._worker = None
        self._executor = None
        self._counts = collections.Counter()
        self._held = 0  # sentences of the requests accepted and not yet answered
        self._batch_seconds = None  # running mean of the model calls' times

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

    async def submit(self, sentences, params):
        """The model's per-sentence results for `sentences`, computed in some batch; `Overloaded` past `max_queue`."""
        if self._worker is None:
            raise RuntimeError("The batcher is not running: start() it first.")
        if not self.running:
            raise ShuttingDown(SHUTTING_DOWN)
        with self.holding(len(sentences)):
            future = asyncio.get_running_loop().create_future()
            self._queue.put_nowait(_Job(list(sentences), params, future))
            return await future

    @contextlib.contextmanager
    def holding(self, num_sentences):
        """Counts `num_sentences` against `max_queue` while the block runs; raises `Overloaded` past it.

        `submit` holds its sentences so; a request that runs in the model
        thread by itself (`run_in_thread`) holds its own around that call.
        """
        if self._held > 0 and self._held + num_sentences > self.max_queue:
            self._counts["rejected_requests"] += 1
            self._counts["rejected_sentences"] += num_sentences
            retry_after = self.retry_after()
            raise Overloaded(f"The server is busy: {self._held} sentences are waiting or being translated, and it "
                             f"holds at most {self.max_queue} (max_queue): send the request again in {retry_after} s.",
                             retry_after)
        self._held += num_sentences
        try:
            yield
        finally:
            self._held -= num_sentences

    def retry_after(self):
        """Whole seconds until the sentences held now are translated, at the recent batch time (at least 1)."""
        if self._batch_seconds is None:
            return 1
        return max(1, math.ceil(math.ceil(self._held / self.max_batch_size) * self._batch_seconds))

    def stats(self):
        """Counters: requests, sentences, batches, batched_requests (shared a batch), largest batch, rejected
        requests and sentences (the queue was full); gauges: queued_sentences (held now), max_queue."""
        return dict(self._counts, queued_sentences=self._held, max_queue=self.max_queue)

    async def _work(self):
        while True:
            batch = await self._next_batch()
            await self._run(batch)

    async def _next_batch(self):
        """Jobs with the parameters of the oldest waiting job, within the size and wait limits.

        Jobs already waiting (those that arrived during the previous batch)
        join at once; then the batch waits up to `max_wait` for more.
        """
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
        if self._fits(batch, job):
            batch.append(job)
        else:
            self._waiting.append(job)

    @staticmethod
    def _size(batch):
        return sum(len(job.sentences) for job in batch)

    async def _run(self, batch):
        """One model call for the whole batch; each job gets its slice of the results (or the error)."""
        batch = [job for job in batch if not job.future.done()]  # cancelled: the client went away
        if not batch:
            return
        sentences = [s for job in batch for s in job.sentences]
        self._count(batch, len(sentences))
        start = time.monotonic()
        try:
            results = await self.run_in_thread(self.run_batch, sentences, batch[0].params)
        except asyncio.CancelledError:
            _fail(batch, ShuttingDown(SHUTTING_DOWN))
            raise
        except Exception as error:  # noqa: BLE001 -- handed to every waiting request
            logger.exception("A batch of %d sentences failed.", len(sentences))
            _fail(batch, error)
            return
        self._time(time.monotonic() - start)
        start = 0
        for job in batch:
            end = start + len(job.sentences)
            if not job.future.done():
                job.future.set_result({name: None if values is None else values[start:end]
                                       for name, values in results.items()})
            start = end

    def _time(self, seconds):
        mean = self._batch_seconds
        self._batch_seconds = seconds if mean is None else (1 - RECENT_WEIGHT) * mean + RECENT_WEIGHT * seconds

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
