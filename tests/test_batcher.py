"""The request batcher, driven by a fake model call: which requests share a batch, and what each gets back.

The fake `run_batch` blocks until the test releases it, so what queues up
meanwhile is decided by the test, not by a wall-clock window.
"""

import asyncio
import threading
import time
import unittest

from t2t_keras.serving.admission import Arrival, DeadlineExceeded
from t2t_keras.serving.batcher import SHUTTING_DOWN, Overloaded, RequestBatcher


class FakeModel:
    """`run_batch` that records its calls and returns each sentence upper-cased; it can be held."""

    def __init__(self, fail=False):
        self.calls = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.fail = fail

    def hold(self):
        self.release.clear()

    def run_batch(self, sentences, params):
        self.calls.append((list(sentences), params))
        self.started.set()
        self.release.wait(10)
        if self.fail:
            raise ValueError("model failed")
        return {"translations": [s.upper() for s in sentences], "params": [params] * len(sentences)}


async def wait_until(condition, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)


async def queue_behind_a_running_batch(batcher, model, requests):
    """Submits one request and holds its batch; submits `requests` `[(sentences, params)]` meanwhile.

    Returns the tasks, the running one first, once all the others are queued.
    """
    model.hold()
    running = asyncio.create_task(batcher.submit(["a"], "p"))
    await wait_until(model.started.is_set)
    queued = [asyncio.create_task(batcher.submit(sentences, params)) for sentences, params in requests]
    await wait_until(lambda: batcher._queue.qsize() == len(requests))
    return [running] + queued


class RequestBatcherTest(unittest.TestCase):
    def run_with(self, model, scenario, **options):
        async def main():
            batcher = RequestBatcher(model.run_batch, **options)
            await batcher.start()
            try:
                return await scenario(batcher)
            finally:
                model.release.set()
                await batcher.stop()

        return asyncio.run(main())

    def test_requests_queued_during_a_batch_share_the_next_one(self):
        model = FakeModel()

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [(["b", "c"], "p"), (["d"], "p"), (["e"], "q")])
            model.release.set()
            return await asyncio.gather(*tasks), batcher.stats()

        results, stats = self.run_with(model, scenario, max_batch_size=8, max_wait_ms=0)
        self.assertEqual(model.calls, [(["a"], "p"), (["b", "c", "d"], "p"), (["e"], "q")])
        self.assertEqual([r["translations"] for r in results], [["A"], ["B", "C"], ["D"], ["E"]])
        self.assertEqual(results[3]["params"], ["q"])
        self.assertEqual((stats["requests"], stats["batches"], stats["largest_batch_requests"]), (4, 3, 2))

    def test_a_batch_never_exceeds_max_batch_size(self):
        model = FakeModel()

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [([f"s{i}"] * 2, "p") for i in range(4)])
            model.release.set()
            return await asyncio.gather(*tasks)

        results = self.run_with(model, scenario, max_batch_size=5, max_wait_ms=0)
        self.assertEqual([len(sentences) for sentences, _ in model.calls], [1, 4, 4])  # 5 would split a request
        self.assertEqual([r["translations"] for r in results[1:]], [[f"S{i}"] * 2 for i in range(4)])

    def test_a_request_larger_than_the_limit_forms_its_own_batch(self):
        model = FakeModel()

        async def scenario(batcher):
            return await batcher.submit(list("abcdef"), "p")

        result = self.run_with(model, scenario, max_batch_size=2, max_wait_ms=0)
        self.assertEqual(result["translations"], list("ABCDEF"))
        self.assertEqual(len(model.calls), 1)

    def test_a_failed_model_call_fails_every_request_of_its_batch(self):
        model = FakeModel(fail=True)

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [(["b"], "p")])
            model.release.set()
            return await asyncio.gather(*tasks, return_exceptions=True)

        with self.assertLogs("t2t_keras.serving.batcher", "ERROR") as logs:
            results = self.run_with(model, scenario, max_wait_ms=0)
        self.assertTrue(all(isinstance(r, ValueError) and "model failed" in str(r) for r in results), results)
        self.assertIn("A batch of 1 sentences failed", logs.output[0])

    def test_stop_fails_the_requests_still_waiting(self):
        model = FakeModel()

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [(["b"], "p")])
            stopping = asyncio.create_task(batcher.stop())
            await asyncio.sleep(0)
            model.release.set()
            await stopping
            return await asyncio.gather(*tasks, return_exceptions=True)

        results = self.run_with(model, scenario, max_wait_ms=0)
        self.assertTrue(all(isinstance(r, RuntimeError) and SHUTTING_DOWN in str(r) for r in results), results)

    def test_requests_past_max_queue_are_refused_at_once(self):
        model = FakeModel()

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [(["b"], "p")])  # holds 2 sentences
            refused = await asyncio.gather(batcher.submit(["c"], "p"), return_exceptions=True)  # the model is held
            held = batcher.stats()
            model.release.set()
            answers = await asyncio.gather(*tasks)
            after = await batcher.submit(["d", "e"], "p")  # the answered requests no longer count
            return refused[0], held, answers, after, batcher.stats()

        refused, held, answers, after, stats = self.run_with(model, scenario, max_batch_size=1, max_wait_ms=0,
                                                             max_queue=2)
        self.assertIsInstance(refused, Overloaded)
        self.assertRegex(str(refused), "2 sentences are waiting or being translated.*at most 2 \\(max_queue\\)")
        self.assertIsInstance(refused.retry_after, int)
        self.assertGreaterEqual(refused.retry_after, 1)
        self.assertEqual((held["queued_sentences"], held["rejected_requests"], held["max_queue"]), (2, 1, 2))
        self.assertEqual([a["translations"] for a in answers], [["A"], ["B"]])
        self.assertEqual(after["translations"], ["D", "E"])
        self.assertEqual((stats["queued_sentences"], stats["rejected_sentences"]), (0, 1))
        self.assertEqual([sentences for sentences, _ in model.calls], [["a"], ["b"], ["d", "e"]])  # c never ran

    def test_a_request_larger_than_the_queue_is_taken_when_nothing_is_held(self):
        model = FakeModel()

        async def scenario(batcher):
            return await batcher.submit(list("abc"), "p")

        self.assertEqual(self.run_with(model, scenario, max_queue=2)["translations"], list("ABC"))

    def test_the_default_queue_holds_two_seconds_of_the_measured_work(self):
        batcher = RequestBatcher(FakeModel().run_batch, max_batch_size=8)
        self.assertEqual(batcher.max_queue, 32)  # four batches until a batch is measured
        batcher.admission.measured(50, 1.0)
        self.assertEqual(batcher.max_queue, 100)
        self.assertEqual(RequestBatcher(FakeModel().run_batch, max_batch_size=8, max_queue_seconds=0.5).max_queue, 32)

    def test_batches_measure_the_throughput(self):
        model = FakeModel()

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [(["b", "c"], "p")])
            model.release.set()
            await asyncio.gather(*tasks)
            return batcher.stats()

        stats = self.run_with(model, scenario, max_wait_ms=0)
        self.assertGreater(stats["sentences_per_second"], 0)

    def test_a_request_whose_deadline_passes_while_queued_is_answered_and_never_translated(self):
        model = FakeModel()

        async def scenario(batcher):
            tasks = await queue_behind_a_running_batch(batcher, model, [])
            late = Arrival(deadline=time.monotonic() + 0.05)
            expired = await asyncio.gather(batcher.submit(["b"], "p", late), return_exceptions=True)
            on_time = Arrival()
            queued = asyncio.create_task(batcher.submit(["c"], "p", on_time))
            await wait_until(lambda: batcher._queue.qsize() == 1)
            model.release.set()  # the model was held all along: "b" expired while queued
            return expired[0], await asyncio.gather(*tasks, queued), on_time, batcher.stats()

        expired, answers, on_time, stats = self.run_with(model, scenario, max_wait_ms=0)
        self.assertIsInstance(expired, DeadlineExceeded)
        self.assertRegex(str(expired), "past its deadline, and was not translated")
        self.assertGreaterEqual(expired.retry_after, 1)
        self.assertEqual([sentences for sentences, _ in model.calls], [["a"], ["c"]])
        self.assertEqual([a["translations"] for a in answers], [["A"], ["C"]])
        self.assertGreaterEqual(on_time.queued_seconds, 0.0)
        self.assertEqual((stats["expired_requests"], stats["queued_sentences"]), (1, 0))

    def test_submit_before_start_is_an_error(self):
        async def scenario():
            return await RequestBatcher(FakeModel().run_batch).submit(["a"], "p")

        with self.assertRaisesRegex(RuntimeError, "start"):
            asyncio.run(scenario())

    def test_rejects_bad_limits(self):
        with self.assertRaisesRegex(ValueError, "max_batch_size=0"):
            RequestBatcher(FakeModel().run_batch, max_batch_size=0)
        with self.assertRaisesRegex(ValueError, "max_queue=0"):
            RequestBatcher(FakeModel().run_batch, max_queue=0)


if __name__ == "__main__":
    unittest.main()
