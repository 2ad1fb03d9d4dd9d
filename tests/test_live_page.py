"""The live page of `serve` in headless Chromium: type a sentence, see the translation, n-best list and heatmap."""

import os
import pathlib
import shutil
import tempfile
import threading
import time
import unittest

import httpx
import numpy as np
import tensorflow as tf
import uvicorn

from t2t_keras.serving.server import create_app
from tests.helpers import TestCase
from tests.test_attention_api import LIMITS, SENTENCES, tiny_text_export
from tests.test_server import TIMEOUT, free_socket  # the server tests bind 127.0.0.1 only

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


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
    """Headless Chromium under chromedriver with a fresh profile, able to run as root, making no requests of its own."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1100,1300", f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def rendered(text):
    """`text` as a browser renders it in HTML: runs of spaces collapse, ends are trimmed (an untrained model's
    "⁇" pieces detokenize with doubled spaces)."""
    return " ".join(text.split())


class LivePageBrowserTest(TestCase):
    """The page in headless Chromium: type a sentence, check the translation, n-best list and heatmap."""

    @classmethod
    def setUpClass(cls):
        reason = browser_skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="live-page-"))
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)  # cleanups run even if set-up fails
        cls.translator = tiny_text_export(cls.tmp)["translator"]
        cls.app = create_app(cls.translator, model_name="toy", max_wait_ms=1, **LIMITS)
        sock = free_socket()
        cls.base_url = "http://{}:{}".format(*sock.getsockname())
        server = uvicorn.Server(uvicorn.Config(cls.app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        cls.addClassCleanup(thread.join, TIMEOUT)
        cls.addClassCleanup(setattr, server, "should_exit", True)
        deadline = time.monotonic() + TIMEOUT
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            raise RuntimeError("the test server did not start")
        cls.driver = start_chromium(cls.tmp / "profile")
        cls.addClassCleanup(cls.driver.quit)

    def rest(self, path, body):
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
        translations = self.translator.generate(SENTENCES[:2], self.translator.defaults).best
        self.assertEqual([rendered(li.text) for li in items], [rendered(t) for t in translations])
        items[1].click()
        self.wait_until_ready()
        self.assertEqual(driver.find_element("id", "nbest-of").text, "of sentence 2")
        attention = self.rest("/v1/models/toy:attention", {"instances": [{"inputs": SENTENCES[1],
                                                                          "targets": translations[1]}]})
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
        self.assertEqual([rendered(t) for t in shown], [rendered(served["translations"][0])])
        rows = driver.find_elements("css selector", "#nbest tbody tr")
        self.assertEqual([rendered(row.find_elements("tag name", "td")[1].text) for row in rows],
                         [rendered(t) for t in served["translations"]])
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
        self.assertEqual(rendered(driver.find_element("css selector", "#nbest tr.selected td:nth-child(2)").text),
                         rendered(served["translations"][1]))
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
