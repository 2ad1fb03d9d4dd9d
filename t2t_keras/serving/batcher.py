"""Batching concurrent requests: an asyncio queue and one worker that runs the model in a thread."""

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging

logger = logging.getLogger(__name__)

SHUTTING_DOWN = "The server is shutting down: send the request again later."


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

    Args:
        run_batch: `run_batch(sentences, params) -> dict` of per-sentence
            lists (or None), e.g. an artifact's `generate(...)._asdict()`.
        max_batch_size: most sentences per model call.
        max_wait_ms: how long the first request of a batch waits for company.
    """

    def __init__(self, run_batch, max_batch_size=32, max_wait_ms=10):
        if max_batch_size < 1 or max_wait_ms < 0:
            raise ValueError("max_batch_size must be >= 1 and max_wait_ms >= 0. "
                             f"Received: max_batch_size={max_batch_size}, max_wait_ms={max_wait_ms}")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self._queue = None
        self._waiting = collections.deque()  # jobs taken from the queue that did not fit a batch
        self._worker = None
        self._executor = None
        self._counts = collections.Counter()

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
        _fail(self._waiting, RuntimeError(SHUTTING_DOWN))
        self._waiting.clear()
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    async def run_in_thread(self, function, *args):
        """Runs `function(*args)` in the model thread (e.g. a warm-up call), between batches."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def submit(self, sentences, params):
        """The model's per-sentence results for `sentences`, computed in some batch."""
        if not self.running:
            raise RuntimeError("The batcher is not running: start() it first.")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Job(list(sentences), params, future))
        return await future

    def stats(self):
        """Counters: requests, sentences, batches, batched_requests (shared a batch), largest batch."""
        return dict(self._counts)

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
        try:
            results = await self.run_in_thread(self.run_batch, sentences, batch[0].params)
        except asyncio.CancelledError:
            _fail(batch, RuntimeError(SHUTTING_DOWN))
            raise
        except Exception as error:  # noqa: BLE001 -- handed to every waiting request
            logger.exception("A batch of %d sentences failed.", len(sentences))
            _fail(batch, error)
            return
        start = 0
        for job in batch:
            end = start + len(job.sentences)
            if not job.future.done():
                job.future.set_result({name: None if values is None else values[start:end]
                                       for name, values in results.items()})
            start = end

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
