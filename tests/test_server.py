"""REST server: TF Serving's predict API, batching of concurrent requests, bad input, clean stop."""

import asyncio
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import tensorflow as tf
import uvicorn

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.export.saved_model import export_translator
from t2t_keras.serving import rest_api
from t2t_keras.serving.server import create_app
from tests.helpers import TestCase, long_check, tiny_transformer, toy_pairs

HOST = "127.0.0.1"  # the tests only ever connect here
TIMEOUT = 60.0
SENTENCES = [pair[0] for pair in toy_pairs(12, seed=3)]
LIMITS = dict(max_request_bytes=4096, max_instances=8, max_sentence_chars=200)

# (request body, expected status); valid bodies are checked against the SavedModel's own outputs.
VALID = [
    {"instances": SENTENCES[0:2]},
    {"instances": [{"inputs": SENTENCES[2]}, {"inputs": ""}]},
    {"inputs": SENTENCES[3:6]},
    {"inputs": {"inputs": SENTENCES[6:8], "beam_size": 1}},
    {"instances": SENTENCES[8:10], "params": {"beam_size": 2, "num_return": 2}},
    {"signature_name": "translate", "instances": [SENTENCES[10]], "params": {"alpha": 1.0}},
    {"instances": [SENTENCES[11]]},
    {"instances": SENTENCES[4:7]},
    {"inputs": [SENTENCES[1]]},
    {"instances": [SENTENCES[5], SENTENCES[0]], "params": {"max_extra_length": 3}},
    {"instances": [SENTENCES[9]]},
    {"instances": SENTENCES[0:4]},
]
INVALID = [
    (b'{"instances": ["unclosed"', "not valid JSON"),
    ({"instance": ["typo"]}, 'Unknown field "instance"'),
    ({"instances": ["ok", 7]}, "instances\\[1\\] is a number, not a string"),
    ({"instances": []}, "holds no sentences"),
    ({"instances": ["x" * 201]}, "has 201 characters; the limit is 200"),
    ({"instances": ["a"] * 9}, "holds 9 sentences; the limit is 8"),
    ({"instances": ["a " * 2500]}, "bytes; the limit is 4096"),
    ({"instances": ["a"], "params": {"beam_size": 3}}, "beam_size must be an integer in \\[1, 2\\]"),
]


def free_socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    return sock


async def post_all(base_url, bodies):
    """Sends every body at once; returns the responses in order."""
    async with httpx.AsyncClient(base_url=base_url, timeout=TIMEOUT) as client:
        def post(body):
            if isinstance(body, bytes):
                return client.post("/v1/models/toy:predict", content=body)
            return client.post("/v1/models/toy:predict", json=body)

        return await asyncio.gather(*(post(body) for body in bodies))


def expected_answer(translator, body):
    """What the server should answer for a valid body, from the SavedModel called directly."""
    parsed = rest_api.parse_predict_request(json.dumps(body).encode())
    request = translator.request(**parsed.params)
    generation = translator.generate(parsed.sentences, request)
    return rest_api.format_predict_response(rest_api.predict_outputs(generation, request, translator.task),
                                            parsed.columnar)


def assert_same_answer(test, got, expected):
    """Equal translations and flags; scores equal within float tolerance (batches differ in padding)."""
    key = "predictions" if "predictions" in expected else "outputs"
    rows_got, rows_expected = got[key], expected[key]
    if key == "outputs":
        rows_got, rows_expected = [rows_got], [rows_expected]
    test.assertEqual(len(rows_got), len(rows_expected))
    for row_got, row_expected in zip(rows_got, rows_expected):
        test.assertEqual(row_got["translations"], row_expected["translations"])
        test.assertEqual(row_got["truncated"], row_expected["truncated"])
        test.assertAllClose(row_got["scores"], row_expected["scores"], atol=1e-4)


def toy_export(root, vocab_size=100, max_length=32, max_beam_size=2, max_extra_length=6):
    """A tiny random model and its tokenizer, exported; returns the export directory."""
    tokenizer = train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "vocab.model",
                                    vocab_size=vocab_size)
    model = tiny_transformer(vocab_size=vocab_size, max_length=max_length)
    return export_translator(model, tokenizer, root / "export", max_beam_size=max_beam_size,
                             request=GenerationRequest(beam_size=max_beam_size, max_extra_length=max_extra_length))


def wait_until(condition, message, timeout=TIMEOUT):
    """Polls `condition()` until it is true; fails with `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.02)


def wait_until_ready(base_url):
    """Waits until `GET /healthz` answers 200: the server listens before its export has loaded."""
    wait_until(lambda: httpx.get(base_url + "/healthz", timeout=TIMEOUT).status_code == 200,
               f"{base_url} did not become ready")


def port_from_log(process):
    """The port of a `serve` process, from uvicorn's start-up line on its stderr."""
    deadline = time.monotonic() + TIMEOUT
    lines = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
        if match:
            return int(match.group(1))
    raise AssertionError("the server did not start:\n" + "".join(lines[-30:]))


def end_process(process):
    """A served process's end in a test's `finally`: killed if it still runs, waited for, its stderr pipe closed."""
    if process.poll() is None:
        process.kill()
    process.wait()
    process.stderr.close()


def start_server(app):
    """Serves `app` on a free loopback port in a thread; returns `(server, thread, base_url)`."""
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not server.started:
        raise RuntimeError("the test server did not start")
    return server, thread, "http://{}:{}".format(*sock.getsockname())


class ServerTest(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.export_dir = toy_export(pathlib.Path(cls.tmp.name))
        cls.translator = SavedModelArtifact(cls.export_dir)
        cls.app = create_app(cls.translator, model_name="toy", max_batch_size=16, max_wait_ms=50, **LIMITS)
        cls.server, cls.thread, cls.base_url = start_server(cls.app)

    @classmethod
    def tearDownClass(cls):
        cls.server.should_exit = True  # the server closes its socket
        cls.thread.join(TIMEOUT)
        cls.tmp.cleanup()

    def get(self, path):
        return httpx.get(self.base_url + path, timeout=TIMEOUT)

    def test_status_metadata_and_health(self):
        self.assertEqual(self.get("/healthz").json(), {"status": "ok"})
        status = self.get("/v1/models/toy").json()["model_version_status"][0]
        self.assertEqual((status["version"], status["state"]), ("1", "AVAILABLE"))
        metadata = self.get("/v1/models/toy/metadata").json()
        signatures = metadata["metadata"]["signature_def"]["signature_def"]
        self.assertEqual(sorted(signatures), ["sample", "score", "serving_default", "translate", "translate_ids"])
        self.assertEqual(signatures["serving_default"]["inputs"]["inputs"]["dtype"], "DT_STRING")
        self.assertEqual(metadata["metadata"]["decoding"]["defaults"]["beam_size"], 2)
        missing = self.get("/v1/models/other")
        self.assertEqual(missing.status_code, 404)
        self.assertIn("other", missing.json()["error"])

    def test_concurrent_requests_are_answered_and_bad_ones_refused(self):
        before = self.get("/statz").json()["batching"]
        bodies = VALID + [body for body, _ in INVALID]
        responses = asyncio.run(post_all(self.base_url, bodies))
        after = self.get("/statz").json()["batching"]
        for body, response in zip(VALID, responses):
            self.assertEqual(response.status_code, 200, response.text)
            assert_same_answer(self, response.json(), expected_answer(self.translator, body))
        for (_, message), response in zip(INVALID, responses[len(VALID):]):
            self.assertEqual(response.status_code, 400, response.text)
            self.assertRegex(response.json()["error"], message)
        # Which requests share a model call is tested with a fake model in test_batcher.
        self.assertEqual(after.get("requests", 0) - before.get("requests", 0), len(VALID))
        self.assertEqual(self.get("/healthz").status_code, 200)  # still serving

    def test_nbest_answer_shape(self):
        body = {"inputs": {"inputs": SENTENCES[:2], "num_return": 2}}
        outputs = asyncio.run(post_all(self.base_url, [body]))[0].json()["outputs"]
        self.assertEqual([len(row) for row in outputs["translations"]], [2, 2])
        self.assertTrue(all(a >= b for a, b in outputs["scores"]))



class ServerStopTest(TestCase):
    def test_stops_cleanly(self):
        with tempfile.TemporaryDirectory() as tmp:
            app = create_app(SavedModelArtifact(toy_export(pathlib.Path(tmp), max_beam_size=1)), model_name="toy")
            server, thread, base_url = start_server(app)
            self.assertEqual(httpx.get(base_url + "/healthz", timeout=TIMEOUT).status_code, 200)
            server.should_exit = True
            thread.join(TIMEOUT)
        self.assertFalse(thread.is_alive())
        self.assertFalse(app.state.batcher.running)
        with self.assertRaises(httpx.ConnectError):
            httpx.get(base_url + "/healthz", timeout=TIMEOUT)


@long_check
class ServeProcessTest(TestCase):
    """`serve()` in its own process: answers, then exits 0 on SIGINT."""

    def test_serve_answers_and_exits_on_sigint(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = train_sentencepiece([s for pair in toy_pairs(100) for s in pair],
                                            pathlib.Path(tmp) / "vocab.model", vocab_size=80)
            export_dir = export_translator(tiny_transformer(vocab_size=80, max_length=16), tokenizer,
                                           pathlib.Path(tmp) / "export", max_beam_size=1,
                                           request=GenerationRequest(beam_size=1, max_extra_length=4))
            code = ("import sys; from t2t_keras.serving.server import serve; "
                    f"serve(sys.argv[1], host='{HOST}', port=0, max_wait_ms=1)")  # TF Serving's default name
            process = subprocess.Popen([sys.executable, "-c", code, str(export_dir)], stderr=subprocess.PIPE,
                                       stdout=subprocess.DEVNULL, text=True,
                                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
            try:
                port = port_from_log(process)
                wait_until_ready(f"http://{HOST}:{port}")
                answer = httpx.post(f"http://{HOST}:{port}/v1/models/default:predict",
                                    json={"instances": ["the cat", ""]}, timeout=TIMEOUT)
                self.assertEqual(answer.status_code, 200)
                self.assertEqual(answer.json()["predictions"][1]["translations"], "")
                process.send_signal(signal.SIGINT)
                self.assertEqual(process.wait(timeout=TIMEOUT), 0)
            finally:
                end_process(process)


class RestFormatTest(TestCase):
    def test_rows_and_columns_parse_to_the_same_sentences(self):
        for body in ({"instances": ["a", "b"]}, {"instances": [{"inputs": "a"}, {"inputs": "b"}]},
                     {"inputs": ["a", "b"]}, {"inputs": {"inputs": ["a", "b"], "beam_size": 2}}):
            parsed = rest_api.parse_predict_request(json.dumps(body).encode())
            self.assertEqual(parsed.sentences, ["a", "b"])
            self.assertEqual(parsed.columnar, "inputs" in body)

    def test_more_bad_bodies(self):
        for body, message in ((b"[1, 2]", "must be a JSON object"), (b"\xff", "not valid JSON"),
                              ({"instances": ["a"], "inputs": ["b"]}, "exactly one of"),
                              ({"instances": [{"text": "a"}]}, 'the one field "inputs"'),
                              ({"instances": "a"}, '"instances" must be a list'),
                              ({"inputs": ["a"], "params": {"beam": 2}}, 'Unknown decoding parameter "beam"'),
                              ({"inputs": {"inputs": ["a"], "beam_size": 1}, "params": {"beam_size": 1}},
                               "given both"),
                              ({"instances": [None]}, "instances\\[0\\] is null"),
                              ({"instances": ["a"], "signature_name": "x"}, "Unknown signature_name")):
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            with self.assertRaisesRegex(rest_api.BadRequest, message):
                rest_api.parse_predict_request(raw)

    def test_non_finite_scores_become_null(self):
        from t2t_keras.decoding.request import Generation

        generation = Generation([["a"]], [[float("-inf")]], [False], None, [None])
        outputs = rest_api.predict_outputs(generation, GenerationRequest(beam_size=1), "translation")
        self.assertEqual(rest_api.format_predict_response(outputs, False),
                         {"predictions": [{"translations": "a", "scores": None, "truncated": False}]})


if __name__ == "__main__":
    tf.test.main()
