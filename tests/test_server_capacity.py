"""The server past its capacity and at the edges of its life: a full queue, loading, draining on SIGTERM.

The model is a stub whose batches wait while a "hold" file exists, so what is queued, in flight or refused
when the test looks is decided by the test, not by a clock. The SIGTERM test sends the signal to a real
`serve` process of the stub.
"""

import concurrent.futures
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

import httpx
import uvicorn

from t2t_keras.errors import T2TError
from t2t_keras.serving.lifecycle import DrainingServer
from t2t_keras.serving.server import create_app, serve
from tests.serving_stub import StubTranslator
from tests.test_server import HOST, TIMEOUT, end_process, port_from_log, start_server, wait_until, wait_until_ready

ROOT = pathlib.Path(__file__).resolve().parents[1]
PREDICT = "/v1/models/{}:predict"


def post(base_url, sentences, name="toy"):
    return httpx.post(base_url + PREDICT.format(name), json={"instances": sentences}, timeout=TIMEOUT)


def get_json(base_url, path):
    return httpx.get(base_url + path, timeout=TIMEOUT).json()


def assert_refused(test, response, message, retry_after=None):
    """A 503 at once: JSON error naming the reason, Retry-After in whole seconds."""
    test.assertEqual(response.status_code, 503, response.text)
    test.assertRegex(response.json()["error"], message)
    seconds = int(response.headers["retry-after"])
    test.assertGreaterEqual(seconds, 1)
    if retry_after is not None:
        test.assertEqual(seconds, retry_after)


class StubServerTestCase(unittest.TestCase):
    """A test of a server of `StubTranslator`s: `self.hold` (held while the file exists, never past the test), a pool
    of client threads, and `serve_in_thread(app)`, stopped when the test ends."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.hold = pathlib.Path(tmp.name) / "hold"
        self.pool = concurrent.futures.ThreadPoolExecutor(4)
        self.addCleanup(self.pool.shutdown)
        self.addCleanup(self.hold.unlink, missing_ok=True)  # runs first: nothing stays held

    def serve_in_thread(self, app, ready=False):
        """The base URL of `app` served in a thread; `ready`: once GET /healthz answers 200."""
        server, thread, base_url = start_server(app)

        def stop():
            server.should_exit = True
            thread.join(TIMEOUT)

        self.addCleanup(stop)
        if ready:
            wait_until_ready(base_url)
        return base_url


class CapacityTest(StubServerTestCase):

    def test_requests_past_the_queue_get_503_at_once_and_those_within_it_their_answers(self):
        app = create_app(StubTranslator(self.hold), model_name="toy", max_batch_size=1, max_wait_ms=0, max_queue=2)
        base_url = self.serve_in_thread(app)
        self.hold.touch()
        accepted = [self.pool.submit(post, base_url, [sentence]) for sentence in ("a", "b")]
        wait_until(lambda: get_json(base_url, "/statz")["batching"].get("queued_sentences") == 2, "not queued")
        refused = [post(base_url, sentences) for sentences in (["c"], ["d", "e"], ["f"])]
        self.assertFalse(any(future.done() for future in accepted))  # answered while the model was still held
        for response in refused:
            assert_refused(self, response, "sentences are waiting or being translated.*at most 2 \\(max_queue\\)")
        self.hold.unlink()
        answers = [future.result() for future in accepted]
        self.assertEqual([a.json()["predictions"][0]["translations"] for a in answers], ["A", "B"])
        stats = get_json(base_url, "/statz")["batching"]
        self.assertEqual((stats["rejected_requests"], stats["rejected_sentences"], stats["requests"]), (3, 4, 2))
        for sentences in (["c"], ["d", "e"], ["f"], ["g"]):  # the refused ones sent again in turn, then a new one
            self.assertEqual(post(base_url, sentences).status_code, 200)

    def test_the_server_listens_while_the_model_loads(self):
        loaded = threading.Event()
        self.addCleanup(loaded.set)

        def slow_load():
            loaded.wait(TIMEOUT)
            return StubTranslator()

        base_url = self.serve_in_thread(create_app(slow_load, model_name="toy"))
        health = httpx.get(base_url + "/healthz", timeout=TIMEOUT)
        self.assertEqual((health.status_code, health.json()), (503, {"status": "loading"}))
        self.assertEqual(get_json(base_url, "/v1/models/toy")["model_version_status"][0]["state"], "LOADING")
        assert_refused(self, post(base_url, ["a"]), "still loading", retry_after=1)
        self.assertEqual(httpx.get(base_url + "/v1/models/toy/metadata", timeout=TIMEOUT).status_code, 503)
        self.assertEqual(get_json(base_url, "/statz")["requests"]["refused_loading"], 2)
        loaded.set()
        wait_until_ready(base_url)
        self.assertEqual(get_json(base_url, "/healthz"), {"status": "ok"})
        self.assertEqual(get_json(base_url, "/v1/models/toy")["model_version_status"][0]["state"], "AVAILABLE")
        self.assertEqual(post(base_url, ["a"]).json()["predictions"][0]["translations"], "A")

    def test_requests_unanswered_when_the_drain_ends_get_503_not_silence(self):
        app = create_app(StubTranslator(self.hold), model_name="toy", max_batch_size=1, max_wait_ms=0)
        sock = socket.create_server((HOST, 0))
        server = DrainingServer(uvicorn.Config(app, log_level="warning"), app.state.model.lifecycle,
                                app.state.model.stop, drain_seconds=0.5)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        base_url = "http://{}:{}".format(*sock.getsockname())
        wait_until_ready(base_url)
        self.hold.touch()
        accepted = [self.pool.submit(post, base_url, [sentence]) for sentence in ("a", "b")]
        wait_until(lambda: get_json(base_url, "/statz")["requests"]["in_flight_requests"] == 2, "not accepted")
        server.handle_exit(signal.SIGTERM, None)  # what the signal calls; the model stays held past the drain
        for response in [future.result() for future in accepted]:
            assert_refused(self, response, "shutting down", retry_after=1)
            self.assertEqual(response.headers["connection"], "close")
        self.assertTrue(self.hold.exists())
        self.hold.unlink()
        thread.join(TIMEOUT)
        self.assertFalse(thread.is_alive())

    def test_a_model_that_fails_to_load_stops_the_server_with_its_error(self):
        def failing_load():
            raise T2TError("exports/x is neither a SavedModel nor a CTranslate2 model")

        with self.assertRaisesRegex(T2TError, "neither a SavedModel"):
            with self.assertLogs("t2t_keras.serving.served_model", "ERROR"):
                serve(failing_load, host=HOST, port=0, log_level="warning")


# A `serve` process of the stub; its batches wait while the file argv[1] exists.
SERVE_STUB = ("import pathlib, sys; from t2t_keras.serving.server import serve; "
              "from tests.serving_stub import StubTranslator; "
              f"serve(lambda: StubTranslator(pathlib.Path(sys.argv[1])), host='{HOST}', port=0, max_batch_size=2, "
              "max_wait_ms=0, drain_seconds=60)")


class SigtermTest(unittest.TestCase):
    def test_sigterm_answers_the_accepted_requests_refuses_new_ones_and_exits_0(self):
        with tempfile.TemporaryDirectory() as tmp:
            hold = pathlib.Path(tmp) / "hold"
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
            process = subprocess.Popen([sys.executable, "-c", SERVE_STUB, str(hold)], stderr=subprocess.PIPE,
                                       stdout=subprocess.DEVNULL, text=True, cwd=ROOT, env=env)
            try:
                base_url = f"http://{HOST}:{port_from_log(process)}"
                wait_until_ready(base_url)
                hold.touch()
                answers, refused, state = self.stop_while_held(process, base_url, hold)
                self.assertEqual(process.wait(timeout=TIMEOUT), 0)
            finally:
                end_process(process)
        for response, sentence in zip(answers, ("a", "b c", "d", "e")):
            self.assertEqual(response.status_code, 200, response.text)
            self.assertEqual(response.json()["predictions"][0]["translations"], sentence.upper())
        assert_refused(self, refused, "shutting down", retry_after=1)
        self.assertEqual(refused.headers["connection"], "close")
        self.assertEqual(state, "UNLOADING")
        with self.assertRaises(httpx.ConnectError):
            httpx.get(base_url + "/healthz", timeout=TIMEOUT)

    def stop_while_held(self, process, base_url, hold):
        """Four requests accepted, SIGTERM, one refused; the answers once the model is let go."""
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            accepted = [pool.submit(post, base_url, [s], "default") for s in ("a", "b c", "d", "e")]
            wait_until(lambda: get_json(base_url, "/statz")["requests"]["in_flight_requests"] == 4, "not accepted")
            process.send_signal(signal.SIGTERM)
            wait_until(lambda: httpx.get(base_url + "/healthz", timeout=TIMEOUT).json() == {"status": "draining"},
                       "the server did not drain")
            refused = post(base_url, ["f"], "default")
            state = get_json(base_url, "/v1/models/default")["model_version_status"][0]["state"]
            self.assertIsNone(process.poll())  # still answering its accepted requests
            hold.unlink()
            return [future.result() for future in accepted], refused, state


if __name__ == "__main__":
    unittest.main()
