"""The HTML attention page (well-formed, self-contained, all the data, working script) and `inspect_run`."""

import html.parser
import json
import pathlib
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
import tensorflow as tf

from t2t_keras.config import load_config
from t2t_keras.data.tokenizer import train_sentencepiece
from t2t_keras.errors import T2TError
from t2t_keras.inspect.attention import AttentionMaps, extract_attention
from t2t_keras.inspect.html_view import render_html
from t2t_keras.inspect.inspect_run import image_name, inspect_run
from t2t_keras.inspect.kinds import KINDS
from t2t_keras.model import build_transformer
from t2t_keras.runs import RunDirectory
from tests.helpers import TestCase, toy_pairs

SOURCE = "the cat sees a big dog"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "source", "wbr"}


class PageParser(html.parser.HTMLParser):
    """Checks that tags nest and close properly; collects scripts, external references and text."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.scripts, self.external, self.text = [], [], [], [], []
        self._script = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.external += [value for name, value in attrs.items() if name in ("src", "href") and value]
        self.external += ["<link>"] if tag == "link" else []
        if tag == "script":
            self._script = {"attrs": attrs, "text": ""}
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag == "script":
            self.scripts.append(self._script)
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self._script["text"] += data
        else:
            self.text.append(data)


def parse_page(page):
    parser = PageParser()
    parser.feed(page)
    parser.close()
    return parser


def page_json(parser):
    (data,) = [s for s in parser.scripts if s["attrs"].get("id") == "attention-data"]
    return json.loads(data["text"])


# A minimal DOM, enough for the page's script, to run it under Node: renders every kind, layer and head,
# hovers the first token on each side and reports the SVG lines drawn and the shading of the other side.
DOM_SHIM = r"""
class El {
  constructor(tag) { this.tag = tag; this.children = []; this.dataset = {}; this.style = {}; this.attrs = {};
    this.listeners = {}; this.textContent = ""; this.classes = new Set(); this.tBodies = []; this._value = null; }
  appendChild(c) { this.children.push(c); return c; }
  set innerHTML(v) { this.children = []; this.tBodies = []; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  addEventListener(t, f) { (this.listeners[t] = this.listeners[t] || []).push(f); }
  fire(t) { for (const f of this.listeners[t] || []) f(); }
  get classList() { const s = this.classes; return { toggle: (n, on) => on ? s.add(n) : s.delete(n) }; }
  get value() { return this._value !== null ? this._value : (this.children[0] ? this.children[0].value : ""); }
  set value(v) { this._value = String(v); }
  get rows() { return this.children; }
  createTHead() {
    const h = this.appendChild(new El("thead")); h.insertRow = () => h.appendChild(new El("tr")); return h;
  }
  createTBody() { const b = this.appendChild(new El("tbody")); this.tBodies.push(b); return b; }
  insertRow() { return this.appendChild(new El("tr")); }
  insertCell() { return this.appendChild(new El("td")); }
}
const ids = {};
for (const id of ["kind", "layer", "head", "left", "right", "lines", "heatmap", "description", "legend"]) {
  ids[id] = new El(id);
}
ids["attention-data"] = new El("script"); ids["attention-data"].textContent = DATA;
global.document = {getElementById: id => ids[id], createElement: t => new El(t), createElementNS: (n, t) => new El(t)};
SCRIPT
const report = [];
for (const kind of ids.kind.children.map(o => o.value)) {
  ids.kind.value = kind; ids.kind.fire("change");
  for (const layer of ids.layer.children.map(o => o.value)) {
    ids.layer.value = layer; ids.layer.fire("change");
    for (const head of ids.head.children.map(o => o.value)) {
      ids.head.value = head; ids.head.fire("change");
      const entry = {kind, layer: Number(layer), head, all: ids.lines.children.length,
                     rows: ids.heatmap.tBodies[0].rows.length, left: ids.left.children.map(d => d.textContent)};
      ids.left.children[0].fire("mouseenter");
      entry.fromFirstQuery = ids.lines.children.length;
      entry.shaded = ids.right.children.filter(d => d.style.background).length;
      ids.left.children[0].fire("mouseleave");
      ids.right.children[0].fire("mouseenter");
      entry.toFirstKey = ids.lines.children.length;
      report.push(entry);
    }
  }
}
console.log(JSON.stringify(report));
"""


def hand_made_maps():
    """Maps with tokens that must be escaped, and weights known in advance."""
    rng = np.random.default_rng(0)

    def weights(layers, queries, keys):
        return rng.dirichlet(np.ones(keys), size=(layers, 2, queries)).astype("float32")

    return AttentionMaps(
        source_tokens=["▁a", "</script>", "<b>&amp;", "</s>"], target_tokens=["<s>", "▁\"x\"", "'y'"],
        encoder=weights(2, 4, 4), decoder_self=np.tril(weights(3, 3, 3)), cross=weights(3, 3, 4),
        translation="\"x\" 'y' </script>", source_text="a </script> <b>&amp;",
    )


class HtmlPageTest(TestCase):
    def setUp(self):
        self.maps = hand_made_maps()
        self.page = render_html(self.maps, title="Attention <test>")
        self.parser = parse_page(self.page)

    def test_page_is_well_formed_and_self_contained(self):
        self.assertEqual(self.parser.errors, [])
        self.assertEqual(self.parser.stack, [])
        self.assertEqual(self.parser.external, [])
        self.assertNotIn("http://cdn", self.page)
        self.assertEqual(len(self.parser.scripts), 2)  # the data and the inline code
        self.assertIn("a </script> <b>&amp;", "".join(self.parser.text))  # escaped text reads back unchanged

    def test_page_holds_the_tokens_and_every_layer_and_head(self):
        data = page_json(self.parser)
        self.assertEqual(data["tokens"], {"source": self.maps.source_tokens, "target": self.maps.target_tokens})
        self.assertEqual(data["order"], list(KINDS))
        for kind in KINDS:
            weights = np.array(data["kinds"][kind]["weights"])
            self.assertEqual(weights.shape, self.maps.weights(kind).shape, kind)  # [layer][head][query][key]
            self.assertAllClose(weights, self.maps.weights(kind), atol=1e-4)

    @unittest.skipUnless(shutil.which("node"), "needs Node.js to run the page's script")
    def test_script_draws_lines_and_heatmaps_for_every_choice(self):
        data_text = page_json(self.parser)
        (code,) = [s["text"] for s in self.parser.scripts if "id" not in s["attrs"]]
        program = DOM_SHIM.replace("SCRIPT", code).replace("DATA", json.dumps(json.dumps(data_text)))
        result = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertEqual(len(report), sum(self.maps.weights(k).shape[0] for k in KINDS) * 3)  # all heads + 2
        for entry in report:
            weights = self.maps.weights(entry["kind"])[entry["layer"]]
            heads = weights if entry["head"] == "all" else weights[[int(entry["head"])]]
            queries, _ = self.maps.axis_tokens(entry["kind"])
            self.assertEqual(entry["left"], queries)
            self.assertEqual(entry["rows"], len(queries))
            self.assertEqual(entry["all"], int(np.sum(heads >= 0.01)), entry)
            self.assertEqual(entry["fromFirstQuery"], int(np.sum(heads[:, 0] >= 0.01)), entry)
            self.assertEqual(entry["toFirstKey"], int(np.sum(heads[:, :, 0] >= 0.01)), entry)
            self.assertEqual(entry["shaded"], heads.shape[-1])


class InspectRunTest(TestCase):
    """`inspect_run` on a run directory holding a tiny model's checkpoint and a toy tokenizer."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        pairs = toy_pairs(200)
        cls.tokenizer = train_sentencepiece([s for pair in pairs for s in pair], root / "t.model", 100)
        config = load_config("tiny", ["model.hidden_dim=16", "model.num_heads=4", "model.intermediate_dim=32",
                                      "data.vocab_size=100"])
        cls.run_dir = RunDirectory(root / "run")
        cls.run_dir.save_config(config)
        cls.tokenizer.save(cls.run_dir.tokenizer_file(config.data.tokenizer))
        cls.model = build_transformer(config.model)
        cls.model.build()
        tf.train.CheckpointManager(tf.train.Checkpoint(model=cls.model), str(cls.run_dir.checkpoint_dir), 1).save(7)
        cls.out = root / "inspect"
        cls.result = inspect_run(cls.run_dir.path, text=SOURCE, out=cls.out, max_extra_length=5, dpi=60)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_attention_of_the_run_model(self):
        expected = extract_attention(self.model, self.tokenizer, SOURCE, max_extra_length=5)
        self.assertEqual(self.result.maps.target_tokens, expected.target_tokens)
        for kind in KINDS:
            self.assertAllClose(self.result.maps.weights(kind), expected.weights(kind), atol=1e-5)

    def test_one_real_png_per_kind_and_layer(self):
        self.assertEqual(set(self.result.images), {(kind, layer) for kind in KINDS for layer in range(2)})
        for (kind, layer), path in self.result.images.items():
            self.assertEqual(path, self.out / image_name(kind, layer))
            content = path.read_bytes()
            self.assertTrue(content.startswith(PNG_SIGNATURE), path)
            image = tf.io.decode_png(content).numpy()
            self.assertGreater(image.shape[0] * image.shape[1], 100 * 100)
            self.assertGreater(len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)), 10)  # not blank

    def test_html_page_with_tokens_and_a_reference(self):
        result = inspect_run(self.run_dir.path, text=SOURCE, out=self.out / "ref", reference="die Katze sieht")
        parser = parse_page(result.html.read_text(encoding="utf-8"))
        self.assertEqual(parser.errors, [])
        data = page_json(parser)
        self.assertEqual(data["tokens"]["source"][-1], "</s>")
        self.assertEqual(data["tokens"]["target"], result.maps.target_tokens)
        self.assertIn("die Katze sieht", "".join(parser.text))
        self.assertEqual(len(data["kinds"]["cross"]["weights"]), 2)

    def test_bad_arguments_raise_clear_errors(self):
        with self.assertRaisesRegex(T2TError, "holds no assets.extra/model.keras"):
            inspect_run(self.tmp.name, text=SOURCE, out=self.out)
        with self.assertRaisesRegex(T2TError, "Give the run directory or the text export to inspect"):
            inspect_run(text=SOURCE, out=self.out)
        with self.assertRaisesRegex(T2TError, "Give a source sentence"):
            inspect_run(self.run_dir.path, text=" ", out=self.out)


if __name__ == "__main__":
    tf.test.main()
