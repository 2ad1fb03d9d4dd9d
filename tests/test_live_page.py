"""The live page of `serve`: the attention endpoint over REST, and the page in a real headless browser."""

import configparser
import fnmatch
import importlib.resources
import json
import os
import pathlib
import shutil
import tempfile
import threading
import time
import unittest

import numpy as np
import tensorflow as tf
import uvicorn
from starlette.testclient import TestClient

from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.export import attention_api
from t2t_keras.export.loaded import SavedModelTranslator
from t2t_keras.export.saved_model import INSPECTION_DIR, export_translator
from t2t_keras.export.server import create_app
from t2t_keras.inspect import html_view
from t2t_keras.inspect.attention import extract_attention
from tests.helpers import TestCase, tiny_transformer, toy_pairs
from tests.test_server import TIMEOUT, free_socket  # the server tests bind 127.0.0.1 only

SENTENCES = [pair[0] for pair in toy_pairs(4, seed=5)]
LONG = " ".join(pair[0] for pair in toy_pairs(6))[:200]  # more pieces than the model's max_length of 32
LIMITS = dict(max_request_bytes=4096, max_instances=4, max_sentence_chars=200)
ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SHARED = {}  # the tiny export, made once for both test classes


def setUpModule():
    tmp = tempfile.TemporaryDirectory()
    root = pathlib.Path(tmp.name)
    tokenizer = train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "vocab.model",
                                    vocab_size=100)
    model = tiny_transformer(vocab_size=100, max_length=32)
    export_dir = export_translator(model, tokenizer, root / "export", max_beam_size=2, beam_size=2,
                                   max_extra_length=6)
    SHARED.update(tmp=tmp, root=root, model=model, tokenizer=tokenizer, export_dir=export_dir,
                  translator=SavedModelTranslator(export_dir))


def tearDownModule():
    SHARED.pop("tmp").cleanup()


def post_attention(client, body, name="toy"):
    return client.post(f"/v1/models/{name}:attention", content=json.dumps(body).encode())


class AttentionEndpointTest(TestCase):
    """`POST /v1/models/NAME:attention` and the page's files, through Starlette's test client."""

    @classmethod
    def setUpClass(cls):
        cls.app = create_app(SHARED["translator"], model_name="toy", max_wait_ms=1, **LIMITS)
        cls.client = TestClient(cls.app).__enter__()  # runs the lifespan: the batcher starts

    @classmethod
    def tearDownClass(cls):
        cls.client.__exit__(None, None, None)

    def test_weights_equal_extract_attention_on_the_given_translation(self):
        target = "die Katze sieht"
        response = post_attention(self.client, {"instances": [{"inputs": SENTENCES[0], "targets": target}],
                                                "params": {"kinds": ["cross", "encoder"]}})
        self.assertEqual(response.status_code, 200, response.text)
        answer = response.json()["predictions"][0]
        maps = extract_attention(SHARED["model"], SHARED["tokenizer"], SENTENCES[0], target)
        self.assertEqual(answer["order"], ["encoder", "cross"])  # the order of KINDS
        self.assertEqual(sorted(answer["kinds"]), ["cross", "encoder"])
        self.assertAllClose(answer["kinds"]["cross"]["weights"], maps.cross, atol=1e-4)
        self.assertAllClose(answer["kinds"]["encoder"]["weights"], maps.encoder, atol=1e-4)
        self.assertEqual(answer["tokens"], {"source": maps.source_tokens, "target": maps.target_tokens})
        self.assertEqual(answer["output_tokens"], maps.target_tokens[1:] + ["</s>"])
        self.assertEqual((answer["translation"], answer["inputs"], answer["num_heads"]),
                         (target, SENTENCES[0], 4))

    def test_without_targets_the_served_translation_is_shown(self):
        response = post_attention(self.client, {"instances": [SENTENCES[1], {"inputs": SENTENCES[2]}]})
        self.assertEqual(response.status_code, 200, response.text)
        predictions = response.json()["predictions"]
        self.assertEqual([p["translation"] for p in predictions],
                         SHARED["translator"].translate(SENTENCES[1:3]))
        for prediction in predictions:
            self.assertEqual(list(prediction["kinds"]), ["cross"])  # the default kind
            cross = np.array(prediction["kinds"]["cross"]["weights"])  # (layers, heads, outputs, sources)
            self.assertEqual(cross.shape, (2, 4, len(prediction["output_tokens"]),
                                           len(prediction["tokens"]["source"])))
            self.assertAllClose(cross.sum(axis=-1), np.ones(cross.shape[:-1]), atol=1e-3)

    def test_bad_requests_are_refused_with_clear_messages(self):
        cases = [
            ({"instance": ["typo"]}, 400, '"instances"'),
            ({"instances": ["a"], "signature_name": "x"}, 400, 'Unknown field "signature_name"'),
            ({"instances": []}, 400, "non-empty list"),
            ({"instances": [7]}, 400, 'instances\\[0\\]\\["inputs"\\] must be a string'),
            ({"instances": [{"inputs": "a", "targets": 3}]}, 400, '\\["targets"\\] must be a string'),
            ({"instances": [{"inputs": "a", "target": "b"}]}, 400, 'must hold "inputs" and optionally "targets"'),
            ({"instances": ["  "]}, 400, "is empty"),
            ({"instances": ["a"] * 5}, 400, "holds 5 sentences; the limit is 4"),
            ({"instances": ["x" * 201]}, 400, "has 201 characters; the limit is 200"),
            ({"instances": ["a"], "params": {"kinds": ["self"]}}, 400, '"kinds" must be a non-empty list'),
            ({"instances": ["a"], "params": {"layer": 1}}, 400, 'Unknown attention parameter "layer"'),
            ({"instances": [LONG]}, 400, '\\["inputs"\\] has \\d+ pieces; the model reads at most 31'),
            ({"instances": [{"inputs": "a", "targets": LONG}]}, 400, '\\["targets"\\] has \\d+ pieces'),
        ]
        for body, status, message in cases:
            response = post_attention(self.client, body)
            self.assertEqual(response.status_code, status, body)
            self.assertRegex(response.json()["error"], message)
        response = self.client.post("/v1/models/toy:attention", content=b"{oops")
        self.assertEqual(response.status_code, 400)
        self.assertIn("not valid JSON", response.json()["error"])
        missing = post_attention(self.client, {"instances": ["a"]}, name="other")
        self.assertEqual(missing.status_code, 404)
        self.assertEqual(self.client.get("/healthz").status_code, 200)  # still serving

    def test_an_export_without_its_keras_model_answers_501(self):
        copy = SHARED["root"] / "without-model"
        shutil.copytree(SHARED["export_dir"], copy, ignore=shutil.ignore_patterns(INSPECTION_DIR))
        with TestClient(create_app(copy, model_name="toy", warm_up=False)) as client:
            response = post_attention(client, {"instances": [{"inputs": "a", "targets": "b"}]})
        self.assertEqual(response.status_code, 501)
        self.assertRegex(response.json()["error"], "cannot show attention.*assets.extra/model.keras")
        with self.assertRaisesRegex(attention_api.AttentionUnavailable, "serves no SavedModel"):
            attention_api.AttentionModel(None).maps(["a"], ["b"])

    def test_inspect_view_of_a_sentence_pair(self):
        target = "die Katze"
        response = self.client.get("/attention", params={"inputs": SENTENCES[0], "targets": target})
        self.assertEqual(response.status_code, 200, response.text)
        self.assertIn("<title>Attention of toy</title>", response.text)
        data = json.loads(response.text.split('id="attention-data">')[1].split("</script>")[0])
        expected = html_view.page_data(extract_attention(SHARED["model"], SHARED["tokenizer"], SENTENCES[0], target))
        self.assertEqual(data["tokens"], expected["tokens"])
        for kind in expected["order"]:
            self.assertAllClose(data["kinds"][kind]["weights"], expected["kinds"][kind]["weights"], atol=1e-3)
        for query, message in (({}, 'must hold "inputs"'),
                               ({"inputs": "a", "layer": "1"}, "found \\['inputs', 'layer'\\]"),
                               ({"inputs": LONG}, "pieces; the model reads at most 31")):
            refused = self.client.get("/attention", params=query)
            self.assertEqual(refused.status_code, 400)
            self.assertRegex(refused.text, message)

    def test_the_page_and_its_files_are_served(self):
        page = self.client.get("/")
        self.assertEqual(page.status_code, 200)
        self.assertIn('<script src="static/page.js">', page.text)
        for name, kind in (("page.js", "javascript"), ("page.css", "text/css")):
            response = self.client.get("/static/" + name)
            self.assertEqual(response.status_code, 200)
            self.assertIn(kind, response.headers["content-type"])
        self.assertEqual(self.client.get("/static/inspect.css").text, html_view.CSS)
        self.assertEqual(self.client.get("/static/missing.js").status_code, 404)

    def test_setup_cfg_ships_every_page_file(self):
        config = configparser.ConfigParser()
        config.read(ROOT / "setup.cfg")
        patterns = [p.strip() for p in config["options.package_data"]["t2t_keras.export"].split(",")]
        files = [f.name for f in importlib.resources.files("t2t_keras.export").joinpath("page").iterdir()]
        self.assertEqual(sorted(files), ["index.html", "page.css", "page.js"])
        for name in files:
            self.assertTrue(any(fnmatch.fnmatch("page/" + name, p) for p in patterns), name)


def browser_skip_reason():
    """Why the browser test cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[test]'"
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        return (f"no browser: {' and '.join(missing)} missing; tests/run installs Debian's chromium and "
                "chromium-driver with apt-get, which failed or is unavailable here")
    return None


def start_chromium(profile_dir):
    """Headless Chromium under chromedriver, kept off the network (see docs: it runs as root here)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1100,1300", f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class LivePageBrowserTest(TestCase):
    """The page in headless Chromium: type a sentence, check the translation, n-best list and heatmap."""

    @classmethod
    def setUpClass(cls):
        reason = browser_skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="live-page-"))
        cls.app = create_app(SHARED["translator"], model_name="toy", max_wait_ms=1, **LIMITS)
        sock = free_socket()
        cls.base_url = "http://{}:{}".format(*sock.getsockname())
        cls.server = uvicorn.Server(uvicorn.Config(cls.app, log_level="warning"))
        cls.thread = threading.Thread(target=cls.server.run, kwargs={"sockets": [sock]}, daemon=True)
        cls.thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not cls.server.started and cls.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not cls.server.started:
            raise RuntimeError("the test server did not start")
        cls.driver = start_chromium(cls.tmp / "profile")

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.should_exit = True
        cls.thread.join(TIMEOUT)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def rest(self, path, body):
        import httpx

        response = httpx.post(self.base_url + path, json=body, timeout=TIMEOUT)
        self.assertEqual(response.status_code, 200, response.text)
        return response.json()["predictions"][0]

    def wait_until_settled(self):
        """Waits while the page loads or waits for the server; returns its state, "ready" or "error"."""
        from selenium.webdriver.support.ui import WebDriverWait

        settled = "const s = document.body.dataset.state; return s === 'ready' || s === 'error' ? s : null;"
        return WebDriverWait(self.driver, 4 * TIMEOUT, poll_frequency=0.2).until(lambda d: d.execute_script(settled))

    def wait_until_ready(self):
        """Waits until the page is ready; fails if it shows an error."""
        if self.wait_until_settled() == "error":
            self.fail("the page shows an error: " + self.driver.find_element("id", "error").text)

    def test_pasted_lines_each_translated_and_server_errors_shown(self):
        driver = self.driver
        driver.get(self.base_url + "/")
        self.wait_until_ready()
        source = driver.find_element("id", "source")
        source.send_keys(SENTENCES[0] + "\n\n" + SENTENCES[1] + "\n")  # the empty line is left out
        driver.find_element("id", "translate").click()
        self.wait_until_ready()
        items = driver.find_elements("css selector", "#translations li")
        self.assertEqual([li.text for li in items], SHARED["translator"].translate(SENTENCES[:2]))
        items[1].click()
        self.wait_until_ready()
        self.assertEqual(driver.find_element("id", "nbest-of").text, "of sentence 2")
        attention = self.rest("/v1/models/toy:attention", {"instances": [{"inputs": SENTENCES[1],
                                                                          "targets": items[1].text}]})
        self.assertEqual(self.heatmap(attention).shape[1], len(attention["tokens"]["source"]))

        source.clear()
        source.send_keys("x" * 201)  # over the server's max_sentence_chars
        driver.find_element("id", "translate").click()
        self.assertEqual(self.wait_until_settled(), "error")
        self.assertIn("has 201 characters; the limit is 200", driver.find_element("id", "error").text)

    def heatmap(self, attention):
        """The heatmap's weights `(outputs, sources)`, after checking its labels against `attention`."""
        heatmap = self.driver.find_element("id", "heatmap")
        columns = [th.get_attribute("textContent") for th in heatmap.find_elements("css selector", "thead th")]
        self.assertEqual(columns, [""] + attention["tokens"]["source"])
        rows = heatmap.find_elements("css selector", "tbody tr")
        self.assertEqual([row.find_element("tag name", "th").get_attribute("textContent") for row in rows],
                         attention["output_tokens"])
        cells = np.array([[float(td.get_attribute("data-weight")) for td in row.find_elements("tag name", "td")]
                          for row in rows])
        # one cell per (output token, source token) pair
        self.assertEqual(cells.shape, (len(attention["output_tokens"]), len(attention["tokens"]["source"])))
        return cells

    def test_typed_sentence_shows_translation_nbest_and_heatmap(self):
        from selenium.webdriver.support.ui import Select

        driver, sentence = self.driver, SENTENCES[3]
        driver.get(self.base_url + "/")
        self.wait_until_ready()
        self.assertEqual(driver.find_element("id", "model-name").text, "toy")
        driver.find_element("id", "source").send_keys(sentence)
        Select(driver.find_element("id", "beam-size")).select_by_value("2")
        Select(driver.find_element("id", "num-return")).select_by_value("2")
        driver.find_element("id", "translate").click()
        self.wait_until_ready()

        served = self.rest("/v1/models/toy:predict", {"signature_name": "translate", "instances": [sentence],
                                                      "params": {"beam_size": 2, "num_return": 2}})
        shown = [li.text for li in driver.find_elements("css selector", "#translations li")]
        self.assertEqual(shown, [served["translations"][0]])
        rows = driver.find_elements("css selector", "#nbest tbody tr")
        self.assertEqual([row.find_elements("tag name", "td")[1].text for row in rows], served["translations"])
        self.assertAllClose([float(row.find_elements("tag name", "td")[2].text) for row in rows],
                            served["scores"], atol=1e-4)

        attention = self.rest("/v1/models/toy:attention",
                              {"instances": [{"inputs": sentence, "targets": served["translations"][0]}]})
        weights = np.array(attention["kinds"]["cross"]["weights"])  # (layers, heads, outputs, sources)
        self.assertAllClose(self.heatmap(attention), weights[-1].mean(axis=0), atol=1e-6)  # last layer, mean
        Select(driver.find_element("id", "layer")).select_by_value("0")
        Select(driver.find_element("id", "head")).select_by_value("1")
        self.assertAllClose(self.heatmap(attention), weights[0, 1], atol=1e-6)

        rows[1].click()  # the second hypothesis of the n-best list
        self.wait_until_ready()
        second = self.rest("/v1/models/toy:attention",
                           {"instances": [{"inputs": sentence, "targets": served["translations"][1]}]})
        self.assertEqual(driver.find_element("css selector", "#nbest tr.selected td:nth-child(2)").text,
                         served["translations"][1])
        self.assertAllClose(self.heatmap(second), np.array(second["kinds"]["cross"]["weights"])[0, 1], atol=1e-6)

        link = driver.find_element("id", "inspect-link").get_attribute("href")
        screenshot = self.tmp / "live_page.png"
        self.assertTrue(driver.save_screenshot(str(screenshot)))
        self.assertGreater(screenshot.stat().st_size, 10_000)
        if os.environ.get("LIVE_PAGE_SCREENSHOT"):  # keep a copy to look at (the temporary directory is removed)
            shutil.copy(screenshot, os.environ["LIVE_PAGE_SCREENSHOT"])

        driver.get(link)  # inspect's view of the chosen pair: encoder self-attention first, all heads
        self.assertEqual(driver.title, "Attention of toy")
        source_tokens = attention["tokens"]["source"]
        self.assertEqual(len(driver.find_elements("css selector", "#heatmap tbody tr")), len(source_tokens))
        self.assertGreater(len(driver.find_elements("css selector", "#lines line")), 0)


if __name__ == "__main__":
    tf.test.main()
