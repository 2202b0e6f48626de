#include "apps/serve/page.h"

namespace kiln::serve {

const std::string& index_page() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Kiln</title>
<style>
 body { font-family: sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
 section { border: 1px solid #ddd; border-radius: 6px; padding: 1em; margin: 1em 0; }
 textarea, input, select { font: inherit; } textarea { width: 100%; }
 .bar { background: #4a7; height: 1em; display: inline-block; vertical-align: middle; }
 pre { white-space: pre-wrap; background: #f6f6f6; padding: .5em; min-height: 2em; }
 svg { background: #fafafa; border: 1px solid #eee; }
 .err { color: #b00; }
</style></head>
<body>
<h1>Kiln</h1>
<p id="models">loading models…</p>

<section id="classify-box" hidden><h2>Try it: classify text</h2>
 <select id="classify-model"></select>
 <textarea id="classify-text" rows="2">The compiler crashed again and the printer is on fire.</textarea>
 <button onclick="classify()">Classify</button>
 <p>Label: <b><span id="classify-label"></span></b></p><div id="classify-probs"></div></section>

<section id="complete-box" hidden><h2>Try it: complete a prompt</h2>
 <select id="complete-model"></select> <input id="prompt" value="The " size="40">
 <button onclick="complete()">Write</button><pre id="completion"></pre></section>

<section id="image-box" hidden><h2>Try it: a Fashion-MNIST test image</h2>
 <select id="image-model"></select> test image <input id="image-index" type="number" value="0" min="0" max="9999">
 <button onclick="classifyImage()">Classify</button> <button onclick="anotherImage()">Another</button><br>
 <canvas id="image" width="112" height="112"></canvas> <b><span id="image-label"></span></b> (true: <span id="image-truth"></span>)</section>

<section><h2>Watch it: training runs</h2><div id="runs">no --runs directory given</div></section>

<script>
// Text from models, runs and errors is untrusted (a class label comes from a
// model's files, a run's name from a directory): it goes in as text, never
// as markup.
const $ = id => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
function el(tag, attrs = {}, ...children) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...children);
  return e;
}
function showError(target, e) { target.replaceChildren(el('span', {class: 'err'}, e.message)); }
let models = [];
async function json(url, body) {
  const r = await fetch(url, body === undefined ? {} : {method: 'POST', body: JSON.stringify(body)});
  const j = await r.json();
  if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
  return j;
}
// Each box shows only when a served model can answer it.
function offer(box, select, kind) {
  const fitting = models.filter(m => m.kind === kind);
  for (const m of fitting) select.add(new Option(m.id, m.id));
  $(box).hidden = fitting.length === 0;
  return fitting.length > 0;
}
async function classify() {
  try {
    const r = await json('/v1/classify', {model: $('classify-model').value, input: $('classify-text').value});
    const d = r.data[0];
    $('classify-label').textContent = d.label;
    const top = Object.entries(d.probabilities).sort((a, b) => b[1] - a[1]).slice(0, 5);
    $('classify-probs').replaceChildren(...top.map(([k, p]) => el('div', {}, k + ' ',
      el('span', {class: 'bar', style: `width:${(p * 300).toFixed(0)}px`}), ` ${(p * 100).toFixed(1)}%`)));
  } catch (e) { showError($('classify-label'), e); }
}
async function complete() {
  const out = $('completion'); out.textContent = '';
  const r = await fetch('/v1/completions', {method: 'POST', body: JSON.stringify(
    {model: $('complete-model').value, prompt: $('prompt').value, max_tokens: 64, temperature: 0.8, top_k: 40, stream: true})});
  if (!r.ok) { out.textContent = (await r.json()).error.message; return; }
  out.textContent = $('prompt').value;
  const reader = r.body.getReader(), dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, at); buf = buf.slice(at + 2);
      if (line.startsWith('data: ') && line !== 'data: [DONE]') out.textContent += JSON.parse(line.slice(6)).choices[0].text;
    }
  }
}
async function classifyImage() {
  try {
    const s = await json('/v1/samples/fashion-mnist/' + $('image-index').value);
    const ctx = $('image').getContext('2d'), img = ctx.createImageData(28, 28);
    s.pixels.forEach((p, i) => { const v = 255 - Math.round(p * 255); img.data.set([v, v, v, 255], i * 4); });
    const tmp = document.createElement('canvas'); tmp.width = tmp.height = 28; tmp.getContext('2d').putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false; ctx.drawImage(tmp, 0, 0, 112, 112);
    const r = await json(`/v2/models/${encodeURIComponent($('image-model').value)}/infer`,
      {inputs: [{name: 'images', shape: [1, 1, 28, 28], datatype: 'FP32', data: s.pixels}]});
    $('image-label').textContent = r.outputs[1].data[0];
    $('image-truth').textContent = s.label;
  } catch (e) { showError($('image-label'), e); }
}
function anotherImage() { $('image-index').value = Math.floor(Math.random() * 10000); classifyImage(); }
// A curve with its axes named: step across, `unit` up, and both ranges.
function plot(id, title, unit, points, color) {
  if (points.length < 2) return el('p', {}, `${title}: not enough points yet`);
  const W = 440, H = 170, L = 60, B = 34, xs = points.map(p => p[0]), ys = points.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = x => L + (W - L - 10) * (x - x0) / Math.max(1e-9, x1 - x0);
  const sy = y => H - B - (H - B - 20) * (y - y0) / Math.max(1e-9, y1 - y0);
  const text = (x, y, s, extra = {}) => el('svg:text', {x, y, 'font-size': 11, ...extra}, s);
  return el('svg:svg', {width: W, height: H},
    text(4, 12, title, {'font-weight': 'bold'}),
    el('svg:line', {x1: L, y1: 20, x2: L, y2: H - B, stroke: '#999'}),
    el('svg:line', {x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: '#999'}),
    text(L - 4, 24, y1.toPrecision(4), {'text-anchor': 'end'}), text(L - 4, H - B, y0.toPrecision(4), {'text-anchor': 'end'}),
    text(12, (H - B) / 2 + 10, unit, {transform: `rotate(-90 12 ${(H - B) / 2 + 10})`, 'text-anchor': 'middle'}),
    text(L, H - B + 14, String(x0)), text(W - 10, H - B + 14, String(x1), {'text-anchor': 'end'}),
    text((L + W) / 2, H - 4, 'step', {'text-anchor': 'middle'}),
    el('svg:polyline', {id, points: points.map(p => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' '),
                        fill: 'none', stroke: color, 'stroke-width': 1.5}));
}
// A run's records; a line that is not JSON (a run still writing it) is left out.
function records(text) {
  return text.split('\n').flatMap(l => { try { return l.trim() ? [JSON.parse(l)] : []; } catch (e) { return []; } });
}
async function watchRuns() {
  let runs;
  try { runs = (await json('/v1/runs')).runs; } catch (e) { return; }
  if (!runs.length) return;
  const views = [];
  for (const run of runs) {
    const lines = records(await (await fetch(`/v1/runs/${encodeURIComponent(run)}/metrics`)).text());
    const train = lines.filter(l => l.kind === 'train'), evals = lines.filter(l => l.kind === 'eval');
    views.push(el('h3', {}, run),
      plot(`loss-${run}`, 'training loss', 'loss', train.filter(l => l.loss !== null).map(l => [l.step, l.loss]), '#c33'),
      plot(`throughput-${run}`, 'throughput', 'items/s', train.map(l => [l.step, l.items_per_s]), '#36c'));
    for (const key of ['val_loss', 'test_accuracy', 'val_bits_per_byte'])
      if (evals.some(l => key in l))
        views.push(plot(`${key}-${run}`, key.replaceAll('_', ' '), key.replaceAll('_', ' '),
                        evals.filter(l => key in l).map(l => [l.step, l[key]]), '#393'));
  }
  $('runs').replaceChildren(...views);
}
async function start() {
  try { models = (await json('/v1/models')).data; } catch (e) { $('models').textContent = e.message; setTimeout(start, 1000); return; }
  $('models').textContent = 'models: ' + models.map(m => `${m.id} (${m.kind})`).join(', ');
  offer('classify-box', $('classify-model'), 'text-classifier');
  offer('complete-box', $('complete-model'), 'language-model');
  const images = offer('image-box', $('image-model'), 'image-classifier');
  const q = new URLSearchParams(location.search);
  if (q.get('image')) $('image-index').value = q.get('image');
  if (images) await classifyImage();  // the box shows an image from the start
  await watchRuns();
  setInterval(watchRuns, 2000);
  if (q.get('classify')) { $('classify-text').value = q.get('classify'); if (q.get('model')) $('classify-model').value = q.get('model'); await classify(); }
  if (q.get('prompt')) { $('prompt').value = q.get('prompt'); await complete(); }
}
start();
</script></body></html>
)HTML";
  return page;
}

}  // namespace kiln::serve
