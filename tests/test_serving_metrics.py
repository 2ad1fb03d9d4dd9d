"""What the server reports: its Prometheus metrics (read back with Prometheus' own parser) and its access log.

The model is the stub of `serving_stub`, whose batches wait while a "hold" file exists, so which requests are
answered, queued, refused or expired is decided by the test.
"""

import io
import json
import threading
import unittest

import httpx
from prometheus_client.parser import text_string_to_metric_families

from t2t_keras.cli_arguments import build_parser
from t2t_keras.serving.access_log import AccessLog, RequestRecord, log_line
from t2t_keras.serving.server import create_app
from tests.serving_stub import StubTranslator
from tests.test_server import TIMEOUT, start_server, wait_until, wait_until_ready
from tests.test_server_capacity import StubServerTestCase, get_json, post

METRICS = "/monitoring/prometheus/metrics"


def scrape(base_url):
    """`{(sample name, frozenset of labels): value}` of the server's metrics, parsed by prometheus_client."""
    response = httpx.get(base_url + METRICS, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version="), response.headers
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


class ServerTestCase(StubServerTestCase):
    def serve_in_thread(self, app, ready=True):
        return super().serve_in_thread(app, ready)


class PrometheusMetricsTest(ServerTestCase):
    def test_requests_batches_queue_and_refusals_by_cause_are_counted(self):
        log = io.StringIO()
        app = create_app(StubTranslator(self.hold), model_name="toy", max_batch_size=1, max_wait_ms=0, max_queue=3,
                         access_log=AccessLog(log))
        base_url = self.serve_in_thread(app)
        self.assertEqual(post(base_url, ["a", "b"]).status_code, 200)  # one batch of 2
        self.assertEqual(httpx.post(base_url + "/v1/models/toy:predict", content=b"{", timeout=TIMEOUT).status_code,
                         400)
        self.hold.touch()
        accepted = [self.pool.submit(post, base_url, [sentence]) for sentence in ("c", "d")]
        wait_until(lambda: get_json(base_url, "/statz")["batching"]["queued_sentences"] == 2, "not queued")
        expired = httpx.post(base_url + "/v1/models/toy:predict", json={"instances": ["f"]}, timeout=TIMEOUT,
                             headers={"grpc-timeout": "50m"})  # queued, and answered once its 50 ms have passed
        refused = post(base_url, ["e", "e"])  # 2 + 2 sentences: past the bound of 3
        self.hold.unlink()
        self.assertEqual([future.result().status_code for future in accepted], [200, 200])
        self.assertEqual((expired.status_code, refused.status_code), (503, 503))
        self.assertRegex(expired.json()["error"], "past its deadline")
        samples = scrape(base_url)

        requests = {code: value(samples, "t2t_serving_requests_total", model="toy", signature="serving_default",
                                code=code) for code in ("200", "400", "503")}
        self.assertEqual(requests, {"200": 3, "400": 1, "503": 2})
        self.assertEqual(value(samples, "t2t_serving_request_latency_seconds_count", model="toy"), 6)
        self.assertEqual({cause: value(samples, "t2t_serving_unavailable_total", cause=cause)
                          for cause in ("loading", "overloaded", "draining", "deadline")},
                         {"loading": 0, "overloaded": 1, "draining": 0, "deadline": 1})
        self.assertEqual(value(samples, "t2t_serving_sentences_translated_total"), 4)
        self.assertEqual(value(samples, "t2t_serving_batch_size_sentences_count"), 3)  # [a, b], [c], [d]
        self.assertEqual(value(samples, "t2t_serving_batch_size_sentences_sum"), 4)
        self.assertEqual(value(samples, "t2t_serving_batch_size_sentences_bucket", le="1.0"), 2)
        self.assertEqual(value(samples, "t2t_serving_queued_seconds_count"), 3)
        self.assertEqual(value(samples, "t2t_serving_queue_sentences"), 0)
        self.assertEqual(value(samples, "t2t_serving_queue_limit_sentences"), 3)
        self.assertEqual(value(samples, "t2t_serving_waiting_their_turn"), 1)  # "e", until it comes back
        self.assertEqual(value(samples, "t2t_serving_model_info", version="1"), 1)
        self.assertGreaterEqual(value(samples, "t2t_serving_model_load_seconds", version="1"), 0)

        lines = [json.loads(line) for line in log.getvalue().splitlines()]
        self.assertEqual(sorted(line["status"] for line in lines), [200, 200, 200, 400, 503, 503])
        for line in lines:
            self.assertEqual(set(line) - {"cause", "retry_after"},
                             {"time", "method", "path", "model", "signature", "status", "sentences", "latency_ms",
                              "queued_ms"})  # no text unless asked
            self.assertRegex(line["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertGreaterEqual(line["latency_ms"], 0)
        answered = [line for line in lines if line["status"] == 200]
        self.assertEqual(sorted(line["sentences"] for line in answered), [1, 1, 2])
        self.assertTrue(all(line["queued_ms"] >= 0 for line in answered))
        self.assertEqual(sorted(line["cause"] for line in lines if line["status"] == 503), ["deadline", "overloaded"])
        self.assertTrue(all(line["retry_after"] >= 1 for line in lines if line["status"] == 503))

    def test_refusals_while_loading_and_draining_are_counted_by_cause(self):
        loaded = threading.Event()
        self.addCleanup(loaded.set)

        def slow_load():
            loaded.wait(TIMEOUT)
            return StubTranslator()

        app = create_app(slow_load, model_name="toy")
        server, thread, base_url = start_server(app)
        self.addCleanup(lambda: (setattr(server, "should_exit", True), thread.join(TIMEOUT)))
        self.assertEqual(post(base_url, ["a"]).status_code, 503)
        self.assertEqual(value(scrape(base_url), "t2t_serving_unavailable_total", cause="loading"), 1)
        loaded.set()
        wait_until_ready(base_url)
        app.state.model.lifecycle.begin_drain(60)
        self.assertEqual(post(base_url, ["a"]).status_code, 503)
        samples = scrape(base_url)
        self.assertEqual(value(samples, "t2t_serving_unavailable_total", cause="draining"), 1)
        self.assertEqual(value(samples, "t2t_serving_requests_total", model="toy", signature="serving_default",
                               code="503"), 2)

    def test_a_malformed_timeout_header_is_a_400_naming_it(self):
        base_url = self.serve_in_thread(create_app(StubTranslator(), model_name="toy"))
        response = httpx.post(base_url + "/v1/models/toy:predict", json={"instances": ["a"]}, timeout=TIMEOUT,
                              headers={"grpc-timeout": "soon"})
        self.assertEqual(response.status_code, 400)
        self.assertRegex(response.json()["error"], "grpc-timeout 'soon' is not a timeout")


class AccessLogTest(unittest.TestCase):
    def record(self):
        record = RequestRecord("POST", "/v1/models/toy:predict", "toy", "translate", sentences=2,
                               text=["Hello.", "Bye."], queued_seconds=0.0123, wall_time=0.0)
        record.finish(200)
        return record

    def test_the_text_is_written_only_when_asked(self):
        self.assertNotIn("text", log_line(self.record()))
        line = log_line(self.record(), include_text=True)
        self.assertEqual(line["text"], ["Hello.", "Bye."])
        self.assertEqual((line["time"], line["queued_ms"], line["signature"]), ("1970-01-01T00:00:00.000Z", 12.3,
                                                                                 "translate"))

    def test_serve_takes_the_access_log_flags(self):
        args = build_parser().parse_args(["serve", "--saved-model", "x", "--access-log"])
        self.assertEqual((args.access_log, args.access_log_text), ("-", False))
        args = build_parser().parse_args(["serve", "--saved-model", "x", "--access-log", "a.jsonl", "--access-log-text",
                                          "--max-queue-seconds", "1.5", "--deadline-seconds", "10"])
        self.assertEqual((args.access_log, args.access_log_text, args.max_queue_seconds, args.deadline_seconds),
                         ("a.jsonl", True, 1.5, 10.0))


if __name__ == "__main__":
    unittest.main()
