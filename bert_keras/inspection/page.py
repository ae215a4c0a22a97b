"""attention.json and attention.html: one self-contained page (no network) to look at attention.

The page has a head view in the manner of bertviz (lines from each query token
on the left to the key tokens on the right, weighted by attention, with a
layer and head picker; hover a token to see only its lines) and a model view
(every layer x head as a small heatmap; click one to pick it). Its own HTML and
JavaScript, with the data inline: it opens from a file with no network access.
`#layer=L&head=H` in the address picks a layer and head (as the pickers do).
"""

import html
import json

import numpy as np


def attention_data(inspection, text, text_pair=None, seq_length=None, hidden_state_norms=True, digits=5):
    """The content of `attention.json` for one `Inspection`.

    Returns:
        dict: `tokens` (the real positions), `type_ids`, `attention` (list over
        layers of lists over heads of `[query][key]` probabilities),
        `num_layers`, `num_heads`, `text`, `text_pair`, `seq_length`,
        `num_wordpieces`, `truncated`, and `hidden_state_norms` (list over
        the embeddings and each layer of the L2 norm at each token) when asked.
    """
    data = {
        "text": text,
        "text_pair": text_pair,
        "tokens": list(inspection.tokens),
        "type_ids": list(inspection.type_ids),
        "num_layers": int(inspection.attention.shape[0]),
        "num_heads": int(inspection.attention.shape[1]),
        "seq_length": seq_length,
        "num_wordpieces": int(inspection.num_wordpieces),
        "truncated": bool(inspection.truncated),
        "attention": np.round(inspection.attention.astype(np.float64), digits).tolist(),
    }
    if hidden_state_norms and inspection.hidden_states is not None:
        norms = np.linalg.norm(inspection.hidden_states.astype(np.float64), axis=-1)  # (layers + 1, n)
        data["hidden_state_norms"] = np.round(norms, 4).tolist()
    return data


def render_page(data, title="Attention"):
    """The HTML text of the page for `attention_data(...)`."""
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    return _TEMPLATE.replace("%TITLE%", html.escape(title)).replace("%DATA%", payload)


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>%TITLE%</title>
<style>
body { font-family: system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 8px 0; }
h2 { font-size: 16px; margin: 18px 0 6px 0; }
#notice { background: #fff3cd; border: 1px solid #e0c060; padding: 6px 10px; margin: 8px 0; display: none; }
#errors { color: #b00; white-space: pre-wrap; }
.controls label { margin-right: 14px; }
#head-view text { font-size: 13px; cursor: default; }
#head-view text.dim { fill: #bbb; }
#model-view { display: grid; gap: 4px; align-items: center; }
#model-view canvas { width: 64px; height: 64px; image-rendering: pixelated; border: 2px solid #ddd; cursor: pointer; }
#model-view canvas.selected { border-color: #d62728; }
#model-view .label { font-size: 11px; color: #555; text-align: right; padding-right: 4px; }
#input-text { color: #555; font-size: 13px; }
</style>
</head>
<body>
<h1>%TITLE%</h1>
<div id="input-text"></div>
<div id="notice"></div>
<div id="errors"></div>
<div class="controls">
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
  <span id="selection"></span>
</div>
<h2>Head view</h2>
<p id="head-help">Left: each token as a query; right: the keys it attends to. Line strength is the attention
probability. Hover a token to see only its lines.</p>
<svg id="head-view" xmlns="http://www.w3.org/2000/svg"></svg>
<h2>Model view</h2>
<p>Every layer (rows) and head (columns): rows of a heatmap are queries, columns keys. Click to pick.</p>
<div id="model-view"></div>
<script id="attention-data" type="application/json">%DATA%</script>
<script>
"use strict";
window.addEventListener("error", function (event) {
  document.getElementById("errors").textContent += "Error: " + event.message + "\\n";
});
const DATA = JSON.parse(document.getElementById("attention-data").textContent);
const SVG_NS = "http://www.w3.org/2000/svg";
const ROW = 20, LEFT_X = 150, RIGHT_X = 430, TOP = 24;
const layerSelect = document.getElementById("layer");
const headSelect = document.getElementById("head");
let hovered = null;

function colour(typeId) { return typeId === 0 ? "31,119,180" : "214,39,40"; }

function headMatrix(layer, head) {
  if (head >= 0) { return DATA.attention[layer][head]; }
  const n = DATA.tokens.length, heads = DATA.attention[layer];
  const mean = [];
  for (let i = 0; i < n; i++) {
    mean.push([]);
    for (let j = 0; j < n; j++) {
      let sum = 0;
      for (let h = 0; h < heads.length; h++) { sum += heads[h][i][j]; }
      mean[i].push(sum / heads.length);
    }
  }
  return mean;
}

function drawHeadView() {
  const layer = Number(layerSelect.value), head = Number(headSelect.value);
  const matrix = headMatrix(layer, head);
  const svg = document.getElementById("head-view");
  const n = DATA.tokens.length;
  svg.setAttribute("width", RIGHT_X + 160);
  svg.setAttribute("height", TOP + n * ROW + 10);
  while (svg.firstChild) { svg.removeChild(svg.firstChild); }
  const lines = document.createElementNS(SVG_NS, "g");
  svg.appendChild(lines);
  for (let i = 0; i < n; i++) {
    if (hovered !== null && hovered !== i) { continue; }
    for (let j = 0; j < n; j++) {
      const weight = matrix[i][j];
      if (weight < 0.01) { continue; }
      const line = document.createElementNS(SVG_NS, "line");
      line.setAttribute("x1", LEFT_X + 6); line.setAttribute("y1", TOP + i * ROW - 4);
      line.setAttribute("x2", RIGHT_X - 6); line.setAttribute("y2", TOP + j * ROW - 4);
      line.setAttribute("stroke", "rgb(" + colour(DATA.type_ids[i]) + ")");
      line.setAttribute("stroke-width", 2.5);
      line.setAttribute("stroke-opacity", Math.min(1, weight).toFixed(4));
      lines.appendChild(line);
    }
  }
  for (let side = 0; side < 2; side++) {
    for (let i = 0; i < n; i++) {
      const text = document.createElementNS(SVG_NS, "text");
      text.textContent = DATA.tokens[i];
      text.setAttribute("class", "token " + (side === 0 ? "query" : "key"));
      text.setAttribute("x", side === 0 ? LEFT_X : RIGHT_X);
      text.setAttribute("y", TOP + i * ROW);
      text.setAttribute("text-anchor", side === 0 ? "end" : "start");
      text.setAttribute("fill", "rgb(" + colour(DATA.type_ids[i]) + ")");
      if (side === 0) {
        if (hovered !== null && hovered !== i) { text.setAttribute("class", "token query dim"); }
        text.addEventListener("mouseenter", function () { hovered = i; drawHeadView(); });
        text.addEventListener("mouseleave", function () { hovered = null; drawHeadView(); });
      }
      svg.appendChild(text);
    }
  }
  document.getElementById("selection").textContent =
    "layer " + (layer + 1) + " of " + DATA.num_layers + ", " +
    (head >= 0 ? "head " + (head + 1) + " of " + DATA.num_heads : "mean of all heads");
}

function drawModelView() {
  const view = document.getElementById("model-view");
  const n = DATA.tokens.length;
  view.style.gridTemplateColumns = "60px repeat(" + DATA.num_heads + ", 68px)";
  view.appendChild(document.createElement("div"));
  for (let h = 0; h < DATA.num_heads; h++) {
    const label = document.createElement("div");
    label.className = "label"; label.style.textAlign = "center"; label.textContent = "head " + (h + 1);
    view.appendChild(label);
  }
  for (let l = 0; l < DATA.num_layers; l++) {
    const label = document.createElement("div");
    label.className = "label"; label.textContent = "layer " + (l + 1);
    view.appendChild(label);
    for (let h = 0; h < DATA.num_heads; h++) {
      const canvas = document.createElement("canvas");
      canvas.width = n; canvas.height = n;
      canvas.dataset.layer = l; canvas.dataset.head = h;
      const context = canvas.getContext("2d");
      const image = context.createImageData(n, n);
      const matrix = DATA.attention[l][h];
      for (let i = 0; i < n; i++) {
        for (let j = 0; j < n; j++) {
          const v = Math.round(255 * (1 - Math.min(1, matrix[i][j])));
          const k = 4 * (i * n + j);
          image.data[k] = v; image.data[k + 1] = v; image.data[k + 2] = 255; image.data[k + 3] = 255;
        }
      }
      context.putImageData(image, 0, 0);
      canvas.addEventListener("click", function () { select(l, h); });
      view.appendChild(canvas);
    }
  }
}

function markSelected() {
  for (const canvas of document.querySelectorAll("#model-view canvas")) {
    const on = Number(canvas.dataset.layer) === Number(layerSelect.value) &&
      Number(canvas.dataset.head) === Number(headSelect.value);
    canvas.classList.toggle("selected", on);
  }
}

function select(layer, head) {
  layerSelect.value = String(layer);
  headSelect.value = String(head);
  layerSelect.dispatchEvent(new Event("change"));
}

function fromHash() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const layer = Number(params.get("layer")), head = Number(params.get("head"));
  if (params.has("layer") && layer >= 0 && layer < DATA.num_layers) { layerSelect.value = String(layer); }
  if (params.has("head") && head >= -1 && head < DATA.num_heads) { headSelect.value = String(head); }
  layerSelect.dispatchEvent(new Event("change"));
}

function init() {
  for (let l = 0; l < DATA.num_layers; l++) { layerSelect.add(new Option("layer " + (l + 1), String(l))); }
  headSelect.add(new Option("mean of heads", "-1"));
  for (let h = 0; h < DATA.num_heads; h++) { headSelect.add(new Option("head " + (h + 1), String(h))); }
  headSelect.value = "0";
  const onChange = function () { drawHeadView(); markSelected(); };
  layerSelect.addEventListener("change", onChange);
  headSelect.addEventListener("change", onChange);
  document.getElementById("input-text").textContent =
    "Text: " + DATA.text + (DATA.text_pair ? "  |  pair: " + DATA.text_pair : "") +
    "  (" + DATA.tokens.length + " tokens)";
  if (DATA.truncated) {
    const notice = document.getElementById("notice");
    notice.style.display = "block";
    notice.textContent = "Truncated: the input has " + DATA.num_wordpieces + " word pieces, but only " +
      (DATA.tokens.length - (DATA.text_pair ? 3 : 2)) + " fit in seq_length " + DATA.seq_length +
      "; the rest is not shown.";
  }
  drawModelView();
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.body.dataset.ready = "true";
}
init();
</script>
</body>
</html>
"""
