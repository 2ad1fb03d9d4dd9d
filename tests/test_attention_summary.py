"""TensorBoard attention summaries: statistics against hand-computed values, the callback in `fit`,
the event files read back with TensorBoard's reader, and a real TensorBoard server listing the images."""

import json
import math
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import keras
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.inspect.attention import BatchAttention
from t2t_keras.inspect.kinds import KINDS
from t2t_keras.inspect.summary import AttentionSummary, attention_statistics
from tests.helpers import TestCase, long_check, random_ids, tiny_transformer, toy_pairs

PROBES = ["the cat sees a dog", "a big old man eats bread under the green tree"]
LAYERS = 2
SERVER_TIMEOUT = 60  # seconds to wait for TensorBoard to start and load the events


def expected_image_tags():
    return {f"attention/{kind}/layer_{layer}" for kind in KINDS for layer in range(LAYERS)}


def expected_scalar_tags():
    tags = set()
    for kind in KINDS:
        boundary = "bos" if kind == "decoder_self" else "eos"
        for name in ("attention_entropy", f"attention_{boundary}_share", "attention_pad_share"):
            tags.update(f"{name}/{kind}/layer_{layer}" for layer in range(LAYERS))
    return tags


def load_events(log_dir):
    """`{plugin: {tag: [TensorEvent]}}` of the TF2 summaries under `log_dir`, via TensorBoard's reader."""
    accumulator = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    events = {}
    for tag in accumulator.Tags()[event_accumulator.TENSORS]:
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        events.setdefault(plugin, {})[tag] = accumulator.Tensors(tag)
    return events


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AttentionStatisticsTest(TestCase):
    def test_statistics_against_hand_computed_values(self):
        source = np.array([[5, 6, 3, 0]])  # 3 real tokens, EOS last, one PAD
        target_in = np.array([[2, 7, 0]])  # BOS, one token, one PAD
        garbage = 0.25  # rows of padding queries are ignored, whatever they hold
        encoder = np.full((1, 1, 2, 4, 4), garbage)
        encoder[..., :3, :] = [1 / 3, 1 / 3, 1 / 3, 0.0]
        decoder_self = np.full((1, 1, 2, 3, 3), garbage)
        decoder_self[..., 0, :] = [1.0, 0.0, 0.0]
        decoder_self[..., 1, :] = [0.5, 0.5, 0.0]
        cross = np.full((1, 1, 2, 3, 4), garbage)
        cross[..., 0, :] = [0.3, 0.3, 0.3, 0.1]  # leaks 0.1 onto padding: broken masking shows up
        cross[..., 1, :] = [0.0, 0.0, 1.0, 0.0]
        stats = attention_statistics(BatchAttention(source, target_in, encoder, decoder_self, cross))
        expected = {
            "attention_entropy/encoder/layer_0": math.log(3),
            "attention_eos_share/encoder/layer_0": 1 / 3,
            "attention_pad_share/encoder/layer_0": 0.0,
            "attention_entropy/decoder_self/layer_0": math.log(2) / 2,
            "attention_bos_share/decoder_self/layer_0": 0.75,
            "attention_pad_share/decoder_self/layer_0": 0.0,
            "attention_entropy/cross/layer_0": -(3 * 0.3 * math.log(0.3) + 0.1 * math.log(0.1)) / 2,
            "attention_eos_share/cross/layer_0": 0.65,
            "attention_pad_share/cross/layer_0": 0.05,
        }
        self.assertEqual(set(stats), set(expected))
        for tag, value in expected.items():
            self.assertAlmostEqual(stats[tag], value, places=6, msg=tag)

    def test_constructor_validation(self):
        with self.assertRaisesRegex(ValueError, "at least one probe sentence"):
            AttentionSummary(None, [], "logs")
        with self.assertRaisesRegex(ValueError, "every_steps must be a positive integer. Received: every_steps=0"):
            AttentionSummary(None, PROBES, "logs", every_steps=0)


@long_check
class AttentionSummaryCallbackTest(TestCase):
    """Three `fit` steps with `every_steps=2` and a write at the end: summaries at steps 2 and 3."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        pairs = toy_pairs(200)
        tokenizer = train_sentencepiece([s for pair in pairs for s in pair], f"{cls.tmp.name}/t.model", 100)
        cls.log_dir = f"{cls.tmp.name}/logs/attention"
        model = tiny_transformer(vocab_size=100, num_heads=2)  # fewer heads: fewer plots to draw
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=True)  # no tracing: the test is about the callback
        x = (random_ids(12, 7, 100, seed=1), random_ids(12, 6, 100, seed=2))
        callback = AttentionSummary(tokenizer, PROBES, cls.log_dir, every_steps=2, max_extra_length=4,
                                    write_on_train_end=True)
        model.fit(x, random_ids(12, 6, 100, seed=3), batch_size=4, epochs=1, callbacks=[callback], verbose=0)
        cls.events = load_events(cls.log_dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(timeout=10)

    def test_image_per_probe_for_every_kind_and_layer(self):
        images = self.events.get("images", {})
        self.assertEqual(set(images), expected_image_tags())
        for tag, events in images.items():
            self.assertEqual([e.step for e in events], [2, 3], tag)
            width, height, *pngs = tf.make_ndarray(events[-1].tensor_proto)
            self.assertEqual(len(pngs), len(PROBES), tag)  # max_outputs keeps every probe
            for png in pngs:
                image = tf.io.decode_png(png).numpy()
                self.assertEqual(image.shape[:2], (int(height), int(width)))
                self.assertLess(image.mean(), 250, "the image is not blank")

    def test_scalars_for_every_layer_and_no_attention_on_padding(self):
        scalars = self.events.get("scalars", {})
        self.assertEqual(set(scalars), expected_scalar_tags())
        for tag, events in scalars.items():
            self.assertEqual([e.step for e in events], [2, 3], tag)
            value = float(tf.make_ndarray(events[-1].tensor_proto))
            if tag.startswith("attention_pad_share"):
                self.assertEqual(value, 0.0, tag)
            elif tag.startswith("attention_entropy"):
                self.assertTrue(0.0 < value <= math.log(30), f"{tag}={value}")
            else:
                self.assertTrue(0.0 <= value <= 1.0, f"{tag}={value}")

    def test_probe_translations_as_text(self):
        events = self.events.get("text", {}).get("attention/translations")
        lines = tf.make_ndarray(events[-1].tensor_proto)
        self.assertEqual(len(lines), len(PROBES))
        self.assertTrue(all(line.decode().startswith(p + " → ") for line, p in zip(lines, PROBES)))

    def _start_tensorboard(self):
        port = free_port()
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", self.log_dir, "--host", "127.0.0.1",
             "--port", str(port), "--load_fast", "false", "--reload_interval", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        return f"http://127.0.0.1:{port}"

    def _get_json(self, url):
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read().decode())

    def test_tensorboard_server_lists_the_image_tags(self):
        base = self._start_tensorboard()
        deadline, tags, error = time.monotonic() + SERVER_TIMEOUT, set(), None
        while time.monotonic() < deadline and tags != expected_image_tags():
            self.assertIsNone(self.server.poll(), "TensorBoard exited")
            try:
                runs = self._get_json(f"{base}/data/plugin/images/tags")
                tags = {tag for run_tags in runs.values() for tag in run_tags}
            except OSError as err:  # not listening yet
                error = err
            time.sleep(0.5)
        self.assertEqual(tags, expected_image_tags(), f"last error: {error}")
        scalar_runs = self._get_json(f"{base}/data/plugin/scalars/tags")
        self.assertTrue(expected_scalar_tags() <= {t for run in scalar_runs.values() for t in run})


if __name__ == "__main__":
    tf.test.main()
