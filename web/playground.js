// playground.js: the layer0 playground. It sends one prompt through the chosen transports at
// once — Anthropic SSE, OpenAI SSE, binary v1 and v2 (through layer0.js, the binary protocol's
// client) — and shows for each, as the bytes arrive: the text, the bytes received, the time to
// the first token, tokens per second and a chart of cumulative bytes over time. Everything it
// loads comes from the gateway that served it; the API key stays in this tab's sessionStorage.
import { stream, fetchVocab, BinaryError } from '/playground/layer0.js';

const TRANSPORTS = {
  anthropic: { name: 'Anthropic SSE', run: runAnthropic },
  openai: { name: 'OpenAI SSE', run: runOpenAI },
  binary1: { name: 'Binary v1', run: (p, req, sig) => runBinary(p, req, sig, 1) },
  binary2: { name: 'Binary v2', run: (p, req, sig) => runBinary(p, req, sig, 2) },
};
const COLORS = { anthropic: '#d2691e', openai: '#10a37f', binary1: '#0b62d6', binary2: '#8250df' };
const KEY_STORE = 'layer0.playground.key';
const ANTHROPIC_VERSION = '2023-06-01';
const base = location.origin;

const $ = (sel) => document.querySelector(sel);
const form = $('#run-form');
const keyInput = $('#key');
const modelSelect = $('#model');
const statusLine = $('#form-status');
const runButton = $('#run');
const stopButton = $('#stop');
const panelsEl = $('#panels');
const traceLinks = $('#trace-links');
const traceOut = $('#trace');

let panels = [];
let controller = null;
let drawQueued = false;

// ---------------------------------------------------------------------------------------------
// The key: this tab only.

keyInput.value = sessionStorage.getItem(KEY_STORE) ?? '';
let keyTimer = null;
keyInput.addEventListener('input', () => {
  if (keyInput.value) sessionStorage.setItem(KEY_STORE, keyInput.value);
  else sessionStorage.removeItem(KEY_STORE);
  // The models the key may use are loaded again once typing pauses.
  clearTimeout(keyTimer);
  keyTimer = setTimeout(loadModels, 300);
});
const apiKey = () => keyInput.value.trim();

function anthropicHeaders() {
  const h = { 'content-type': 'application/json', 'anthropic-version': ANTHROPIC_VERSION };
  if (apiKey()) h['x-api-key'] = apiKey();
  return h;
}

// ---------------------------------------------------------------------------------------------
// Errors in words: the status, what it means, and the server's message (with the field of a 400
// and the wait of a 429).

class HTTPError extends Error {
  constructor(status, type, message, { param = '', retryAfter = '', requestId = '' } = {}) {
    super(message);
    this.status = status;
    this.type = type;
    this.param = param;
    this.retryAfter = retryAfter;
    this.requestId = requestId;
  }
}

async function errorOf(res) {
  let type = '';
  let message = `HTTP ${res.status}`;
  let param = '';
  try {
    const body = await res.json();
    const e = body?.error ?? {};
    type = e.type ?? '';
    message = e.message ?? message;
    param = e.param ?? '';
  } catch { /* not JSON */ }
  return new HTTPError(res.status, type, message, {
    param, retryAfter: res.headers.get('retry-after') ?? '', requestId: res.headers.get('x-request-id') ?? '',
  });
}

function describe(err) {
  if (err?.name === 'AbortError') return 'stopped';
  const status = err?.status;
  if (!status) return `error: ${err?.message ?? err}`;
  const msg = err.message ?? '';
  switch (status) {
    case 401: return `401 authentication failed: ${msg} — check the API key`;
    case 403: return `403 not allowed: ${msg}`;
    case 429: {
      const wait = err.retryAfter ? `retry in ${err.retryAfter} s` : 'retry later';
      return `429 rate limited, ${wait}: ${msg}`;
    }
    case 400: return `400 invalid request${err.param ? ` (field ${err.param})` : ''}: ${msg}`;
    default: return `${status} ${err.type || 'error'}: ${msg}`;
  }
}

// ---------------------------------------------------------------------------------------------
// Panels

class Panel {
  constructor(id) {
    this.id = id;
    this.el = $('#panel-template').content.firstElementChild.cloneNode(true);
    this.el.dataset.transport = id;
    this.el.querySelector('.name').textContent = TRANSPORTS[id].name;
    this.canvas = this.el.querySelector('.chart');
    this.reset();
  }

  reset() {
    this.start = performance.now();
    this.bytes = 0;
    this.points = [[0, 0]];
    this.ttft = null;
    this.last = null;
    this.tokens = 0;
    this.finalTokens = null;
    this.text = '';
    this.requestId = '';
    this.trace = null;
    this.state = 'running';
    this.error = '';
    this.render();
  }

  got(n) {
    const t = performance.now() - this.start;
    // A step, not a ramp: nothing arrived between the previous chunk (or the request) and this one.
    this.points.push([t, this.bytes]);
    this.bytes += n;
    this.points.push([t, this.bytes]);
    this.changed();
  }

  addText(s) {
    if (!s) return;
    const t = performance.now() - this.start;
    if (this.ttft === null) this.ttft = t;
    this.last = t;
    this.tokens++;
    this.text += s;
    this.changed();
  }

  fail(err) {
    this.state = 'error';
    this.error = describe(err);
    if (err?.requestId && !this.requestId) this.requestId = err.requestId;
    this.changed();
  }

  finish() {
    if (this.state === 'running') this.state = 'done';
    this.changed();
  }

  changed() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => { drawQueued = false; for (const p of panels) p.render(); });
  }

  tokensPerSecond() {
    const n = this.finalTokens ?? this.tokens;
    if (this.ttft === null || this.last === null || n < 2 || this.last <= this.ttft) return null;
    return (n - 1) / ((this.last - this.ttft) / 1000); // the rate after the first token
  }

  render() {
    const q = (s) => this.el.querySelector(s);
    q('.bytes').textContent = this.bytes.toLocaleString('en-US');
    q('.bytes').dataset.value = String(this.bytes);
    q('.ttft').textContent = this.ttft === null ? '–' : `${this.ttft.toFixed(this.ttft < 100 ? 1 : 0)} ms`;
    const tps = this.tokensPerSecond();
    q('.tps').textContent = tps === null ? '–' : tps.toFixed(0);
    q('.tokens').textContent = String(this.finalTokens ?? this.tokens);
    const text = q('.text');
    if (text.textContent !== this.text) {
      const atEnd = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
      text.textContent = this.text;
      if (atEnd) text.scrollTop = text.scrollHeight;
    }
    q('.error').textContent = this.error;
    q('.state').textContent = this.state;
    const ref = panels.find((p) => p.id === 'anthropic');
    const ratio = ref && ref !== this && ref.bytes > 0 && this.state === 'done' && ref.state === 'done'
      ? `${((this.bytes / ref.bytes) * 100).toFixed(1)}% of Anthropic SSE's bytes` : '';
    q('.rid').textContent = this.requestId ? `request ${this.requestId}` : '';
    q('.ratio').textContent = ratio;
    this.el.dataset.state = this.state;
    this.el.dataset.requestId = this.requestId;
    this.draw();
  }

  // draw plots cumulative bytes over time, on the scale shared by every panel so their lines
  // compare at a glance.
  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(c.clientWidth * dpr));
    const h = Math.max(1, Math.round(c.clientHeight * dpr));
    if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
    const g = c.getContext('2d');
    g.clearRect(0, 0, w, h);
    const maxT = Math.max(1, ...panels.map((p) => p.points.at(-1)[0]));
    const maxB = Math.max(1, ...panels.map((p) => p.bytes));
    g.strokeStyle = COLORS[this.id];
    g.lineWidth = 2 * dpr;
    // The scale's label has the top band to itself: lines are drawn below it.
    const top = 18 * dpr;
    g.beginPath();
    for (const [i, [t, b]] of this.points.entries()) {
      const x = (t / maxT) * (w - 2 * dpr) + dpr;
      const y = h - dpr - (b / maxB) * (h - top - dpr);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    }
    g.stroke();
    g.fillStyle = getComputedStyle(document.body).color;
    g.font = `${11 * dpr}px system-ui, sans-serif`;
    g.textAlign = 'right';
    g.fillText(`scale: ${maxB.toLocaleString('en-US')} B, ${maxT.toFixed(0)} ms`, w - 4 * dpr, 12 * dpr);
  }
}

// ---------------------------------------------------------------------------------------------
// Transports. Each counts the body's bytes as they arrive, before decoding them.

/** A pass-through stream that counts each chunk's bytes on the panel as it arrives. */
function counting(panel) {
  return new TransformStream({ transform(chunk, out) { panel.got(chunk.byteLength); out.enqueue(chunk); } });
}

/** Splits an SSE body into {event, data} messages; comment lines are passed as {comment}. */
async function* sse(body, panel) {
  const dec = new TextDecoder();
  let buf = '';
  const parse = function* (block) {
    let event = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) yield { comment: line.slice(1).trim() };
      else if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (data.length) yield { event, data: data.join('\n') };
  };
  const reader = body.pipeThrough(counting(panel)).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      yield* parse(block);
    }
  }
  buf += dec.decode();
  if (buf.trim()) yield* parse(buf);
}

function inlineTrace(panel, comment) {
  if (comment.startsWith('layer0-trace ')) {
    try { panel.trace = JSON.parse(comment.slice('layer0-trace '.length)); } catch { /* not for us */ }
  }
}

function debugHeader(h) {
  if ($('#debug').checked) h['x-layer0-debug'] = '1';
  return h;
}

async function post(panel, path, headers, body, signal) {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: debugHeader(headers), body: JSON.stringify(body), signal });
  panel.requestId = res.headers.get('x-request-id') ?? '';
  if (!res.ok) throw await errorOf(res);
  return res;
}

async function runAnthropic(panel, req, signal) {
  const res = await post(panel, '/v1/messages', anthropicHeaders(), { ...req, stream: true }, signal);
  for await (const m of sse(res.body, panel)) {
    if (m.comment !== undefined) { inlineTrace(panel, m.comment); continue; }
    const ev = JSON.parse(m.data);
    if (ev.type === 'content_block_delta' && ev.delta?.type === 'text_delta') panel.addText(ev.delta.text);
    else if (ev.type === 'message_delta' && ev.usage) panel.finalTokens = ev.usage.output_tokens;
    else if (ev.type === 'error') throw new HTTPError(0, ev.error?.type ?? 'error', ev.error?.message ?? 'stream error');
  }
}

async function runOpenAI(panel, req, signal) {
  const headers = { 'content-type': 'application/json' };
  if (apiKey()) headers.authorization = `Bearer ${apiKey()}`;
  const body = {
    model: req.model, max_tokens: req.max_tokens, messages: req.messages, stream: true,
    stream_options: { include_usage: true },
  };
  const res = await post(panel, '/v1/chat/completions', headers, body, signal);
  for await (const m of sse(res.body, panel)) {
    if (m.comment !== undefined) { inlineTrace(panel, m.comment); continue; }
    if (m.data === '[DONE]') continue; // read on to the end: a debug key's trace comes after it, and every byte counts
    const ev = JSON.parse(m.data);
    if (ev.error) throw new HTTPError(0, ev.error.type ?? 'error', ev.error.message ?? 'stream error');
    panel.addText(ev.choices?.[0]?.delta?.content ?? '');
    if (ev.usage) panel.finalTokens = ev.usage.completion_tokens;
  }
}

// The binary protocol's vocabulary, fetched once before a run (layer0.js keeps it): a binary
// panel then times its answer, not the vocabulary's first download.
let vocabReady = null;
function loadVocab() {
  vocabReady ??= (async () => {
    const res = await fetch(`${base}/v1/binary/vocab`, { method: 'HEAD' }); // redirected to the current one
    if (!res.ok) throw await errorOf(res);
    return fetchVocab(base, new URL(res.url).pathname.split('/').pop());
  })();
  vocabReady.catch(() => { vocabReady = null; });
  return vocabReady;
}

async function runBinary(panel, req, signal, version) {
  // layer0.js makes the requests; this fetch counts the answer's bytes on the way and keeps
  // its headers (request id, retry-after) for the panel.
  let failed = null;
  const countingFetch = async (url, init) => {
    const res = await fetch(url, init);
    if (!url.endsWith('/v1/messages')) return res;
    panel.requestId = res.headers.get('x-request-id') ?? '';
    if (!res.ok) { failed = res; return res; }
    return new Response(res.body.pipeThrough(counting(panel)), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  try {
    for await (const ev of stream(base, req, { version, apiKey: apiKey(), headers: debugHeader({}), signal, fetch: countingFetch })) {
      if (ev.type === 'text') panel.addText(ev.text);
      else if (ev.type === 'usage') panel.finalTokens = ev.usage.output_tokens;
    }
  } catch (e) {
    if (e instanceof BinaryError) {
      throw new HTTPError(e.status, e.type, e.message, { retryAfter: failed?.headers.get('retry-after') ?? '' });
    }
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// Running

function chosen() {
  return [...form.querySelectorAll('input[name=transport]:checked')].map((i) => i.value);
}

async function run(ev) {
  ev.preventDefault();
  const ids = chosen();
  statusLine.textContent = '';
  statusLine.dataset.kind = '';
  if (ids.length === 0) { statusLine.textContent = 'Choose at least one transport.'; return; }
  if (!modelSelect.value) { statusLine.textContent = 'Type an API key first: the models it may use load then.'; return; }
  const maxTokens = Number($('#max-tokens').value);
  const req = {
    model: modelSelect.value, max_tokens: maxTokens,
    messages: [{ role: 'user', content: $('#prompt').value }],
  };
  controller = new AbortController();
  runButton.disabled = true;
  stopButton.disabled = false;
  document.body.dataset.state = 'running';
  panels = ids.map((id) => new Panel(id));
  panelsEl.replaceChildren(...panels.map((p) => p.el));
  if (ids.some((id) => id.startsWith('binary'))) {
    try { await loadVocab(); } catch { /* each binary panel fetches it, and shows why it failed */ }
  }
  for (const p of panels) p.reset(); // the same start for every transport
  await Promise.all(panels.map(async (p) => {
    try {
      await TRANSPORTS[p.id].run(p, req, controller.signal);
    } catch (e) {
      p.fail(e);
    }
    p.finish();
  }));
  for (const p of panels) p.render();
  runButton.disabled = false;
  stopButton.disabled = true;
  controller = null;
  showTraceLinks();
  document.body.dataset.state = 'done';
}

stopButton.addEventListener('click', () => controller?.abort());
form.addEventListener('submit', run);

// ---------------------------------------------------------------------------------------------
// Decision traces: inline (a debug key that asked) or fetched by request id.

function showTraceLinks() {
  const withIds = panels.filter((p) => p.requestId);
  if (withIds.length === 0) { traceLinks.textContent = 'No request id came back.'; return; }
  traceLinks.replaceChildren('Request ids: ');
  for (const p of withIds) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = `${TRANSPORTS[p.id].name}: ${p.requestId}`;
    b.addEventListener('click', () => showTrace(p));
    const a = document.createElement('a');
    a.href = `/debug/requests/${encodeURIComponent(p.requestId)}`;
    a.textContent = 'raw';
    traceLinks.append(b, ' ', a, ' ');
  }
  const inline = withIds.find((p) => p.trace);
  traceOut.textContent = inline ? JSON.stringify(inline.trace, null, 2) : '';
}

async function showTrace(p) {
  if (p.trace) { traceOut.textContent = JSON.stringify(p.trace, null, 2); return; }
  const headers = {};
  if (apiKey()) headers['x-api-key'] = apiKey();
  try {
    const res = await fetch(`${base}/debug/requests/${encodeURIComponent(p.requestId)}`, { headers });
    if (!res.ok) throw await errorOf(res);
    traceOut.textContent = JSON.stringify(await res.json(), null, 2);
  } catch (e) {
    traceOut.textContent = `No trace: ${describe(e)}`;
  }
}

// ---------------------------------------------------------------------------------------------
// Models the key may use.

let modelsAsked = 0;

async function loadModels() {
  const asked = ++modelsAsked; // an answer to an earlier key is dropped
  const key = apiKey();
  try {
    const res = await fetch(`${base}/v1/models?limit=1000`, { headers: anthropicHeaders() });
    if (asked !== modelsAsked) return;
    if (res.status === 401 && !key) {
      // A gateway with keys, and none typed yet: a hint, not an error; the models load as the
      // key is typed.
      modelSelect.replaceChildren(new Option('(type an API key)', ''));
      statusLine.dataset.kind = 'hint';
      statusLine.textContent = 'This gateway needs an API key: type it above and the models it may use appear.';
      return;
    }
    if (!res.ok) throw await errorOf(res);
    const { data = [] } = await res.json();
    if (asked !== modelsAsked) return;
    const keep = modelSelect.value;
    modelSelect.replaceChildren(...data.map((m) => new Option(m.display_name && m.display_name !== m.id ? `${m.id} (${m.display_name})` : m.id, m.id)));
    if (data.some((m) => m.id === keep)) modelSelect.value = keep;
    statusLine.dataset.kind = data.length ? '' : 'hint';
    statusLine.textContent = data.length ? '' : 'This key may use no model.';
  } catch (e) {
    if (asked !== modelsAsked) return;
    statusLine.dataset.kind = '';
    statusLine.textContent = `Models: ${describe(e)}`;
  } finally {
    if (asked === modelsAsked) document.body.dataset.models = 'loaded';
  }
}

$('#load-models').addEventListener('click', loadModels);
loadModels();
document.body.dataset.ready = 'true';
