// The live page of `t2t-keras serve`: translations, n-best lists and attention, all from the REST API.
// No framework and no build step; URLs are relative to the page, so a proxy may serve it under a prefix.
// `document.body.dataset.state` is "loading", "busy", "ready" or "error".
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const state = {model: null, sentences: [], results: [], sentence: 0, hypothesis: 0, attention: null, request: 0};

  function setState(name, message) {
    document.body.dataset.state = name;
    $("status").textContent = message || "";
  }
  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = false;
    setState("error");
  }
  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    select.appendChild(o);
  }

  // One REST call; the server's {"error": ...} becomes the thrown message.
  async function call(path, body) {
    const init = body === undefined ? {} :
      {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
    const response = await fetch(path, init);
    let data;
    try {
      data = await response.json();
    } catch (error) {
      throw new Error(path + " answered HTTP " + response.status + " without JSON.");
    }
    if (!response.ok) throw new Error(data.error || path + " answered HTTP " + response.status + ".");
    return data;
  }
  const modelPath = (suffix) => "v1/models/" + encodeURIComponent(state.model) + suffix;

  async function start() {
    state.model = (await call("statz")).model_name;
    $("model-name").textContent = state.model;
    const decoding = (await call(modelPath("/metadata"))).metadata.decoding;
    for (let b = 1; b <= decoding.max_beam_size; b++) option($("beam-size"), b, b);
    $("beam-size").value = decoding.defaults.beam_size;
    fillNumReturn();
    setState("ready");
  }
  function fillNumReturn() {  // num_return may not exceed the beam size
    const beam = Number($("beam-size").value), keep = Number($("num-return").value) || beam;
    $("num-return").innerHTML = "";
    for (let n = 1; n <= beam; n++) option($("num-return"), n, n);
    $("num-return").value = Math.min(keep, beam);
  }

  async function translate() {
    const sentences = $("source").value.split("\n").map((s) => s.trim()).filter((s) => s);
    if (!sentences.length) return showError("Type or paste an English sentence first.");
    const request = ++state.request;
    $("error").hidden = true;
    setState("busy", "Translating…");
    const numReturn = Number($("num-return").value);
    const answer = await call(modelPath(":predict"), {
      signature_name: "translate", instances: sentences,
      params: {beam_size: Number($("beam-size").value), num_return: numReturn},
    });
    if (request !== state.request) return;  // a newer request replaced this one
    state.sentences = sentences;
    state.results = answer.predictions.map((p) => ({  // with num_return 1 the server answers scalars
      translations: numReturn > 1 ? p.translations : [p.translations],
      scores: numReturn > 1 ? p.scores : [p.scores],
      truncated: p.truncated,
    }));
    $("results").hidden = false;
    showTranslations();
    await choose(0, 0);
  }

  function showTranslations() {
    const list = $("translations");
    list.innerHTML = "";
    state.results.forEach((result, i) => {
      const li = document.createElement("li");
      li.className = "translation";
      li.textContent = result.translations[0];
      if (result.truncated) li.title = "The input was cut to the model's longest input.";
      clickable(li, () => choose(i, 0));
      list.appendChild(li);
    });
  }
  function showNbest() {
    const body = $("nbest").tBodies[0], result = state.results[state.sentence];
    body.innerHTML = "";
    $("nbest-of").textContent = state.results.length > 1 ? "of sentence " + (state.sentence + 1) : "";
    result.translations.forEach((text, k) => {
      const tr = body.insertRow();
      tr.insertCell().textContent = k + 1;
      tr.insertCell().textContent = text;
      const score = tr.insertCell();
      score.className = "score";
      score.textContent = result.scores[k] === null ? "-inf" : result.scores[k].toFixed(4);
      tr.classList.toggle("selected", k === state.hypothesis);
      clickable(tr, () => choose(state.sentence, k));
    });
    Array.from($("translations").children).forEach((li, i) => li.classList.toggle("selected", i === state.sentence));
  }

  // Shows sentence i's n-best list and the attention of its hypothesis k.
  async function choose(i, k) {
    const request = ++state.request;
    state.sentence = i;
    state.hypothesis = k;
    showNbest();
    const pair = {inputs: state.sentences[i], targets: state.results[i].translations[k]};
    $("inspect-link").href = "attention?" + new URLSearchParams(pair);
    setState("busy", "Computing attention…");
    const answer = await call(modelPath(":attention"), {instances: [pair]});
    if (request !== state.request) return;
    state.attention = answer.predictions[0];
    fillLayersAndHeads();
    drawHeatmap();
    setState("ready");
  }

  function fillLayersAndHeads() {
    const layers = state.attention.kinds.cross.weights.length, heads = state.attention.num_heads;
    const layer = $("layer").value === "" ? layers - 1 : Math.min(Number($("layer").value), layers - 1);
    const head = $("head").value || "mean";
    $("layer").innerHTML = "";
    $("head").innerHTML = "";
    for (let l = 0; l < layers; l++) option($("layer"), l, "layer " + l);
    option($("head"), "mean", "mean of heads");
    for (let h = 0; h < heads; h++) option($("head"), h, "head " + h);
    $("layer").value = layer;
    $("head").value = head === "mean" || Number(head) < heads ? head : "mean";
  }

  // The chosen layer's weights [output][source], one head's or the mean over heads.
  function chosenWeights() {
    const layer = state.attention.kinds.cross.weights[Number($("layer").value)], head = $("head").value;
    if (head !== "mean") return layer[Number(head)];
    return layer[0].map((row, q) => row.map((_, k) => layer.reduce((sum, h) => sum + h[q][k], 0) / layer.length));
  }

  // Rows: output tokens; columns: source tokens; as in inspect's HTML view.
  function drawHeatmap() {
    const table = $("heatmap"), weights = chosenWeights();
    const outputs = state.attention.output_tokens, sources = state.attention.tokens.source;
    table.innerHTML = "";
    const head = table.createTHead().insertRow(), body = table.createTBody();
    head.appendChild(document.createElement("th"));
    for (const s of sources) {
      const th = document.createElement("th");
      th.textContent = s;
      head.appendChild(th);
    }
    outputs.forEach((out, q) => {
      const tr = body.insertRow();
      const th = document.createElement("th");
      th.textContent = out;
      tr.appendChild(th);
      sources.forEach((src, k) => {
        const w = weights[q][k], td = tr.insertCell();
        td.style.background = "rgba(31, 119, 180, " + w + ")";
        td.dataset.weight = w;
        td.title = out + " \u2192 " + src + ": " + w.toFixed(3);
      });
    });
  }

  // Runs an async action, reporting its failure on the page.
  function run(promise) {
    promise.catch((error) => showError(error.message));
  }
  // Click or Enter runs `action` (a list item or table row that chooses what the heatmap shows).
  function clickable(element, action) {
    element.tabIndex = 0;
    element.addEventListener("click", () => run(action()));
    element.addEventListener("keydown", (event) => {
      if (event.key === "Enter") run(action());
    });
  }

  $("form").addEventListener("submit", (event) => {
    event.preventDefault();
    run(translate());
  });
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      run(translate());
    }
  });
  $("beam-size").addEventListener("change", fillNumReturn);
  for (const id of ["layer", "head"]) $(id).addEventListener("change", () => state.attention && drawHeatmap());
  run(start());
})();
