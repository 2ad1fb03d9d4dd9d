"""The server's attention endpoints (`POST /v1/models/NAME:attention`, `GET /attention`) and the page's files."""

import configparser
import fnmatch
import importlib.resources
import json
import pathlib
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from starlette.testclient import TestClient

from t2t_keras.artifacts.saved_model import SavedModelArtifact
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.decoding.request import GenerationRequest
from t2t_keras.export.saved_model import export_translator
from t2t_keras.inspect import html_view
from t2t_keras.inspect.attention import extract_attention
from t2t_keras.runs import INSPECTION_DIR
from t2t_keras.serving import attention_api
from t2t_keras.serving.server import create_app
from tests.helpers import TestCase, best_texts, tiny_transformer, toy_pairs
from tests.test_server import wait_until

SENTENCES = [pair[0] for pair in toy_pairs(4, seed=5)]
LONG = " ".join(pair[0] for pair in toy_pairs(6))[:200]  # more pieces than the model's max_length of 32
LIMITS = dict(max_request_bytes=4096, max_instances=4, max_sentence_chars=200)
ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = {}  # the tiny export, made once for the module


def tiny_text_export(root):
    """A random tiny model (max_length 32) exported with its tokenizer to `root/export`, beam size 2 at most.

    Returns a dict with `model`, `tokenizer`, `export_dir` and `translator` (a `SavedModelArtifact`).
    """
    import keras

    root = pathlib.Path(root)
    # Seeded: an untrained model's output depends on its weights, and the page's tests need translations whose
    # text (with "⁇" for unknown pieces, re-tokenized) fits the model's 32 positions.
    keras.utils.set_random_seed(0)
    tokenizer = train_sentencepiece([s for pair in toy_pairs(200) for s in pair], root / "vocab.model",
                                    vocab_size=100)
    model = tiny_transformer(vocab_size=100, max_length=32)
    export_dir = export_translator(model, tokenizer, root / "export", max_beam_size=2,
                                   request=GenerationRequest(beam_size=2, max_extra_length=6))
    return dict(model=model, tokenizer=tokenizer, export_dir=export_dir, translator=SavedModelArtifact(export_dir))


def setUpModule():
    tmp = tempfile.TemporaryDirectory()
    SHARED.update(tmp=tmp, root=pathlib.Path(tmp.name), **tiny_text_export(tmp.name))


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
                         best_texts(SHARED["translator"], SENTENCES[1:3]))
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
            # A directory is opened once the server runs: /healthz says "loading" until then.
            wait_until(lambda: client.get("/healthz").status_code == 200, "the export did not load")
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
        patterns = [p.strip() for p in config["options.package_data"]["t2t_keras.serving"].split(",")]
        files = [f.name for f in importlib.resources.files("t2t_keras.serving").joinpath("page").iterdir()]
        self.assertEqual(sorted(files), ["index.html", "page.css", "page.js"])
        for name in files:
            self.assertTrue(any(fnmatch.fnmatch("page/" + name, p) for p in patterns), name)


if __name__ == "__main__":
    tf.test.main()
