"""A self-contained interactive HTML page of the attention of one sentence pair.

The page needs nothing but a browser: data, CSS and JavaScript are inline (no
CDN). One chooses the attention kind, the layer and a head (or all heads, each
in its own colour, as in the paper's Figures 3-5). The line view links every
token on the left (the one attending) to the tokens on the right it attends
to, with opacity = weight; hovering a token keeps only its lines and shades
the tokens on the other side by weight. Below, a heatmap shows the same
weights (the mean over heads when all heads are selected).
"""

import html
import json

import numpy as np

from t2t_keras.inspect.heads import HEAD_COLORS
from t2t_keras.inspect.kinds import KIND_TITLES, KINDS

DECIMALS = 4  # weights are stored rounded: the page stays small and the lines look the same

CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.texts p { margin: 0.2em 0; }
#controls { margin: 1em 0; display: flex; gap: 1.5em; align-items: center; }
#lineview { display: flex; align-items: flex-start; }
.column { display: flex; flex-direction: column; }
.token { height: 22px; line-height: 22px; padding: 0 6px; font-family: monospace; font-size: 14px;
         cursor: default; white-space: pre; border-radius: 3px; }
#left .token { text-align: right; }
.token.active { outline: 2px solid #333; }
#lines line { stroke-linecap: round; }
#heatmap { border-collapse: collapse; margin-top: 1em; font-family: monospace; font-size: 12px; }
#heatmap td { width: 22px; height: 22px; padding: 0; border: 1px solid #eee; }
#heatmap th { font-weight: normal; padding: 0 4px; white-space: pre; }
#heatmap thead th { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }
#heatmap tr.active th { background: #ffd; }
.note { color: #666; font-size: 0.9em; }
"""

SCRIPT = """
(function () {
  const data = JSON.parse(document.getElementById("attention-data").textContent);
  const ROW = 22, GAP = 220, MIN_WEIGHT = 0.01;  // lines below MIN_WEIGHT are not drawn
  const COLORS = data.colors;  // one per head, as in the other views (inspect.heads)
  const kindSelect = document.getElementById("kind"), layerSelect = document.getElementById("layer"),
        headSelect = document.getElementById("head");
  const left = document.getElementById("left"), right = document.getElementById("right"),
        svg = document.getElementById("lines"), table = document.getElementById("heatmap");
  const color = h => COLORS[h % COLORS.length];

  function option(select, value, text) {
    const o = document.createElement("option"); o.value = value; o.textContent = text; select.appendChild(o);
  }
  function current() {
    const kind = data.kinds[kindSelect.value];
    const layer = kind.weights[Number(layerSelect.value)];
    const heads = headSelect.value === "all" ? layer.map((_, h) => h) : [Number(headSelect.value)];
    return {kind: kind, layer: layer, heads: heads,
            queries: data.tokens[kind.queries], keys: data.tokens[kind.keys]};
  }
  function meanWeight(view, q, k) {
    let total = 0;
    for (const h of view.heads) total += view.layer[h][q][k];
    return total / view.heads.length;
  }
  function fillLayers() {
    const count = data.kinds[kindSelect.value].weights.length, keep = Number(layerSelect.value) || 0;
    layerSelect.innerHTML = "";
    for (let i = 0; i < count; i++) option(layerSelect, i, "layer " + i);
    layerSelect.value = Math.min(keep, count - 1);
  }
  function tokenColumn(element, tokens, side) {
    element.innerHTML = "";
    tokens.forEach((t, i) => {
      const div = document.createElement("div");
      div.className = "token"; div.textContent = t; div.dataset.index = i;
      div.addEventListener("mouseenter", () => focus(side, i));
      div.addEventListener("mouseleave", () => focus(null, -1));
      element.appendChild(div);
    });
  }
  function drawLines(view, side, index) {
    svg.innerHTML = "";
    const rows = Math.max(view.queries.length, view.keys.length);
    svg.setAttribute("width", GAP); svg.setAttribute("height", rows * ROW);
    for (const h of view.heads) {
      for (let q = 0; q < view.queries.length; q++) {
        for (let k = 0; k < view.keys.length; k++) {
          const w = view.layer[h][q][k];
          if (w < MIN_WEIGHT || (side === "left" && q !== index) || (side === "right" && k !== index)) continue;
          const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
          line.setAttribute("x1", 2); line.setAttribute("y1", q * ROW + ROW / 2);
          line.setAttribute("x2", GAP - 2); line.setAttribute("y2", k * ROW + ROW / 2);
          line.setAttribute("stroke", color(h)); line.setAttribute("stroke-opacity", w);
          line.setAttribute("stroke-width", view.heads.length > 1 ? 2 : 3);
          svg.appendChild(line);
        }
      }
    }
  }
  function shade(view, side, index) {
    const other = side === "left" ? right : left;
    for (const el of [left, right]) for (const div of el.children) {
      div.classList.toggle("active", el !== other && Number(div.dataset.index) === index);
      div.style.background = "";
    }
    if (side === null) return;
    for (const div of other.children) {
      const j = Number(div.dataset.index);
      const w = side === "left" ? meanWeight(view, index, j) : meanWeight(view, j, index);
      div.style.background = "rgba(31, 119, 180, " + w + ")";
    }
    for (const tr of table.tBodies[0].rows) {
      tr.classList.toggle("active", side === "left" && Number(tr.dataset.index) === index);
    }
  }
  function focus(side, index) {
    const view = current();
    drawLines(view, side, index);
    shade(view, side, index);
  }
  function drawHeatmap(view) {
    table.innerHTML = "";
    const head = table.createTHead().insertRow(), body = table.createTBody();
    head.appendChild(document.createElement("th"));
    for (const k of view.keys) { const th = document.createElement("th"); th.textContent = k; head.appendChild(th); }
    view.queries.forEach((q, i) => {
      const tr = body.insertRow(); tr.dataset.index = i;
      const th = document.createElement("th"); th.textContent = q; tr.appendChild(th);
      view.keys.forEach((_, j) => {
        const w = meanWeight(view, i, j), td = tr.insertCell();
        td.style.background = "rgba(31, 119, 180, " + w + ")";
        td.title = q + " \\u2192 " + view.keys[j] + ": " + w.toFixed(3);
      });
    });
  }
  function legend(view) {
    const note = document.getElementById("legend");
    note.innerHTML = "";
    for (const h of view.heads) {
      const span = document.createElement("span");
      span.textContent = "\\u25A0 head " + h + "  "; span.style.color = color(h); note.appendChild(span);
    }
  }
  function render() {
    const view = current();
    tokenColumn(left, view.queries, "left"); tokenColumn(right, view.keys, "right");
    document.getElementById("description").textContent = view.kind.title + ": " + view.kind.description;
    legend(view); drawHeatmap(view); focus(null, -1);
  }

  for (const name of data.order) option(kindSelect, name, data.kinds[name].title);
  option(headSelect, "all", "all heads");
  for (let h = 0; h < data.num_heads; h++) option(headSelect, h, "head " + h);
  fillLayers();
  kindSelect.addEventListener("change", () => { fillLayers(); render(); });
  layerSelect.addEventListener("change", render);
  headSelect.addEventListener("change", render);
  render();
})();
"""

DESCRIPTIONS = {
    "encoder": "each source token (left) attends to the source tokens (right).",
    "decoder_self": "each target token (left) attends to itself and the earlier target tokens (right).",
    "cross": "each target token (left) attends to the source tokens (right).",
}
AXES = {"encoder": ("source", "source"), "decoder_self": ("target", "target"), "cross": ("target", "source")}


def page_data(maps):
    """The JSON-ready data of the page: tokens, and for each kind the weights `[layer][head][query][key]`."""
    kinds = {}
    for kind in KINDS:
        queries, keys = AXES[kind]
        kinds[kind] = {
            "title": KIND_TITLES[kind],
            "description": DESCRIPTIONS[kind],
            "queries": queries,
            "keys": keys,
            "weights": np.round(maps.weights(kind).astype(np.float64), DECIMALS).tolist(),
        }
    return {
        "tokens": {"source": list(maps.source_tokens), "target": list(maps.target_tokens)},
        "order": list(KINDS),
        "num_heads": int(maps.num_heads),
        "colors": list(HEAD_COLORS),
        "kinds": kinds,
    }


def _script_json(value):
    """JSON that is safe inside a <script> element: no '<', '>' or '&' characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_html(maps, title="Attention"):
    """The page for `maps` (an `AttentionMaps`), as a string."""
    escape = html.escape
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(title)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>{escape(title)}</h1>
<div class="texts">
<p><b>source:</b> {escape(maps.source_text)}</p>
<p><b>translation:</b> {escape(maps.translation)}</p>
</div>
<div id="controls">
<label>attention <select id="kind"></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
</div>
<p class="note" id="description"></p>
<p class="note" id="legend"></p>
<div id="lineview">
<div class="column" id="left"></div>
<svg id="lines" xmlns="http://www.w3.org/2000/svg"></svg>
<div class="column" id="right"></div>
</div>
<table id="heatmap"></table>
<p class="note">Hover a token to see what it attends to (left) or what attends to it (right).</p>
<script type="application/json" id="attention-data">{_script_json(page_data(maps))}</script>
<script>{SCRIPT}</script>
</body>
</html>
"""


def write_html(maps, path, title="Attention"):
    """Writes the page for `maps` to `path`; returns the path."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render_html(maps, title))
    return path
