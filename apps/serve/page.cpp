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

<section><h2>Try it: classify text</h2>
 <select id="classify-model"></select>
 <textarea id="classify-text" rows="2">The compiler crashed again and the printer is on fire.</textarea>
 <button onclick="classify()">Classify</button>
 <p>Label: <b><span id="classify-label"></span></b></p><div id="classify-probs"></div></section>

<section><h2>Try it: complete a prompt</h2>
 <select id="complete-model"></select> <input id="prompt" value="The " size="40">
 <button onclick="complete()">Write</button><pre id="completion"></pre></section>

<section><h2>Try it: a Fashion-MNIST test image</h2>
 <select id="image-model"></select> test image <input id="image-index" type="number" value="0" min="0" max="9999">
 <button onclick="classifyImage()">Classify</button><br>
 <canvas id="image" width="112" height="112"></canvas> <b><span id="image-label"></span></b> (true: <span id="image-truth"></span>)</section>

<section><h2>Watch it: training runs</h2><div id="runs">no --runs directory given</div></section>

<script>
const $ = id => document.getElementById(id);
let models = [];
async function json(url, body) {
  const r = await fetch(url, body === undefined ? {} : {method: 'POST', body: JSON.stringify(body)});
  const j = await r.json();
  if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
  return j;
}
function fill(select, kind) {
  for (const m of models.filter(m => m.kind === kind)) select.add(new Option(m.id, m.id));
}
async function classify() {
  try {
    const r = await json('/v1/classify', {model: $('classify-model').value, input: $('classify-text').value});
    const d = r.data[0];
    $('classify-label').textContent = d.label;
    const top = Object.entries(d.probabilities).sort((a, b) => b[1] - a[1]).slice(0, 5);
    $('classify-probs').innerHTML = top.map(([k, p]) =>
      `<div>${k} <span class="bar" style="width:${(p * 300).toFixed(0)}px"></span> ${(p * 100).toFixed(1)}%</div>`).join('');
  } catch (e) { $('classify-label').innerHTML = `<span class="err">${e.message}</span>`; }
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
    const r = await json(`/v2/models/${$('image-model').value}/infer`,
      {inputs: [{name: 'images', shape: [1, 1, 28, 28], datatype: 'FP32', data: s.pixels}]});
    $('image-label').textContent = r.outputs[1].data[0];
    $('image-truth').textContent = s.label;
  } catch (e) { $('image-label').innerHTML = `<span class="err">${e.message}</span>`; }
}
function plot(id, points, color) {
  if (points.length < 2) return `<p>${id}: not enough points yet</p>`;
  const W = 420, H = 160, xs = points.map(p => p[0]), ys = points.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = x => 40 + (W - 50) * (x - x0) / Math.max(1e-9, x1 - x0), sy = y => H - 20 - (H - 30) * (y - y0) / Math.max(1e-9, y1 - y0);
  const pts = points.map(p => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' ');
  return `<svg width="${W}" height="${H}"><text x="4" y="14" font-size="11">${id}: ${y1.toPrecision(4)}</text>` +
    `<text x="4" y="${H - 24}" font-size="11">${y0.toPrecision(4)}</text><text x="40" y="${H - 4}" font-size="11">step ${x0}</text>` +
    `<text x="${W - 70}" y="${H - 4}" font-size="11">step ${x1}</text>` +
    `<polyline id="${id}" points="${pts}" fill="none" stroke="${color}" stroke-width="1.5"/></svg>`;
}
async function watchRuns() {
  let runs;
  try { runs = (await json('/v1/runs')).runs; } catch (e) { return; }
  if (!runs.length) return;
  let html = '';
  for (const run of runs) {
    const text = await (await fetch(`/v1/runs/${encodeURIComponent(run)}/metrics`)).text();
    const lines = text.split('\n').filter(l => l.trim()).map(l => JSON.parse(l));
    const train = lines.filter(l => l.kind === 'train'), evals = lines.filter(l => l.kind === 'eval');
    html += `<h3>${run}</h3>` + plot(`loss-${run}`, train.filter(l => l.loss !== null).map(l => [l.step, l.loss]), '#c33') +
      plot(`throughput-${run}`, train.map(l => [l.step, l.items_per_s]), '#36c');
    for (const key of ['val_loss', 'test_accuracy', 'val_bits_per_byte'])
      if (evals.some(l => key in l)) html += plot(`${key}-${run}`, evals.filter(l => key in l).map(l => [l.step, l[key]]), '#393');
  }
  $('runs').innerHTML = html;
}
async function start() {
  try { models = (await json('/v1/models')).data; } catch (e) { $('models').textContent = e.message; setTimeout(start, 1000); return; }
  $('models').textContent = 'models: ' + models.map(m => `${m.id} (${m.kind})`).join(', ');
  fill($('classify-model'), 'text-classifier'); fill($('complete-model'), 'language-model'); fill($('image-model'), 'image-classifier');
  await watchRuns();
  setInterval(watchRuns, 2000);
  const q = new URLSearchParams(location.search);
  if (q.get('classify')) { $('classify-text').value = q.get('classify'); if (q.get('model')) $('classify-model').value = q.get('model'); await classify(); }
  if (q.get('image')) { $('image-index').value = q.get('image'); await classifyImage(); }
  if (q.get('prompt')) { $('prompt').value = q.get('prompt'); await complete(); }
}
start();
</script></body></html>
)HTML";
  return page;
}

}  // namespace kiln::serve
