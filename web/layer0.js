// layer0.js: a client for layer0's binary streaming protocol (docs/protocol.md), versions 1 and 2.
// An ES module with no dependencies, for browsers and Node 18+: it uses fetch, ReadableStream,
// TextDecoder and AbortSignal only. Frames may arrive split at any byte; the wire vocabulary is
// fetched once per hash and kept in memory (the server marks it immutable, so the HTTP cache keeps
// it across page loads too).
//
//   import { stream, collect } from './layer0.js';
//   for await (const ev of stream('https://gw.example', { model: 'sim', max_tokens: 100,
//       messages: [{ role: 'user', content: 'Hi' }] }, { version: 2, apiKey })) {
//     if (ev.type === 'text') output.textContent += ev.text;
//   }

export const MEDIA_TYPE = 'application/x-anthropic-binary';
export const MAGIC = [0x41, 0x4e, 0x54, 0x48]; // "ANTH"

/** Frame types; 0-3 exist in both versions, the others in version 2 only. */
export const FrameType = Object.freeze({
  TOKEN: 0, USAGE: 1, ERROR: 2, DONE: 3, TEXT: 4, START: 5,
  BLOCK_START: 6, TOOL_INPUT: 7, BLOCK_STOP: 8, STOP: 9,
});

const MAX_PAYLOAD_V1 = 0xffff;
const MAX_PAYLOAD_V2 = 1 << 24;
const STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'refusal'];
const ERROR_TYPES = {
  400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error',
  404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error',
  504: 'timeout_error', 529: 'overloaded_error',
};

const utf8 = new TextEncoder();

/** An error the server sent: an HTTP error response, or an error frame inside the stream. */
export class BinaryError extends Error {
  constructor(status, type, code, message) {
    super(message);
    this.name = 'BinaryError';
    this.status = status;
    this.type = type;
    this.code = code;
  }
}

/** The stream could not be decoded (not the server's report of an error). */
export class ProtocolError extends Error {
  constructor(message) {
    super(`layer0: ${message}`);
    this.name = 'ProtocolError';
  }
}

// ---------------------------------------------------------------------------------------------
// Requests

/** Byte builder with the protocol's primitives. */
class Builder {
  constructor() { this.buf = new Uint8Array(256); this.n = 0; }
  grow(k) {
    if (this.n + k <= this.buf.length) return;
    const b = new Uint8Array(Math.max(this.buf.length * 2, this.n + k));
    b.set(this.buf.subarray(0, this.n));
    this.buf = b;
  }
  u8(v) { this.grow(1); this.buf[this.n++] = v; }
  u16(v) { this.u8(v >>> 8 & 0xff); this.u8(v & 0xff); }
  bytes(b) { this.grow(b.length); this.buf.set(b, this.n); this.n += b.length; }
  uvarint(v) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`layer0: ${v} is not a uvarint`);
    while (v >= 0x80) { this.u8(v % 0x80 | 0x80); v = Math.floor(v / 0x80); }
    this.u8(v);
  }
  str(s) { const b = utf8.encode(s); this.uvarint(b.length); this.bytes(b); }
  f64(v) {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, v, false);
    this.bytes(b);
  }
  result() { return this.buf.slice(0, this.n); }
}

function blocksOf(content) {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return content;
}

function systemBlocks(system) {
  if (system === undefined || system === null) return [];
  if (typeof system === 'string') return [system];
  return system.map((b) => (typeof b === 'string' ? b : b.text));
}

/**
 * Encodes a request in the Anthropic Messages shape ({model, max_tokens, system, messages, ...};
 * content may be a string or blocks) as a binary body. version is 1 or 2; output 'text' asks a
 * version-2 server for text frames instead of token IDs. Version 1 refuses what it cannot carry.
 */
export function encodeRequest(req, { version = 1, output = 'tokens' } = {}) {
  if (version === 1) return encodeV1(req);
  if (version === 2) return encodeV2(req, output);
  throw new RangeError(`layer0: unsupported version ${version}`);
}

function encodeV1(req) {
  const refuse = (what) => { throw new RangeError(`layer0: version 1 cannot carry ${what}; use version 2`); };
  for (const k of ['temperature', 'top_p', 'top_k', 'tools', 'tool_choice', 'metadata']) {
    if (req[k] !== undefined && req[k] !== null) refuse(k);
  }
  if (req.stop_sequences && req.stop_sequences.length) refuse('stop_sequences');
  const model = utf8.encode(req.model);
  if (model.length < 1 || model.length > 255) refuse(`a model name of ${model.length} bytes`);
  if (!(req.max_tokens >= 1 && req.max_tokens <= 0xffff)) refuse(`max_tokens ${req.max_tokens}`);
  const msgs = systemBlocks(req.system).map((text) => [2, text]);
  for (const m of req.messages) {
    const blocks = blocksOf(m.content);
    if (blocks.length !== 1 || blocks[0].type !== 'text') refuse('a message that is not one text block');
    msgs.push([m.role === 'assistant' ? 1 : 0, blocks[0].text]);
  }
  if (msgs.length > 255) refuse(`${msgs.length} messages`);
  const b = new Builder();
  b.bytes(MAGIC);
  b.u8(model.length);
  b.bytes(model);
  b.u8(msgs.length);
  for (const [role, text] of msgs) {
    const t = utf8.encode(text);
    if (t.length > 0xffff) refuse(`a message of ${t.length} bytes`);
    b.u8(role);
    b.u16(t.length);
    b.bytes(t);
  }
  b.u16(req.max_tokens);
  return b.result();
}

function encodeBlock(b, bl) {
  switch (bl.type) {
    case 'text':
      b.u8(0); b.str(bl.text); return;
    case 'image':
      b.u8(1);
      if (bl.source.type === 'url') { b.u8(1); b.str(bl.source.url); return; }
      b.u8(0); b.str(bl.source.media_type); b.str(bl.source.data); return;
    case 'tool_use':
      b.u8(2); b.str(bl.id); b.str(bl.name); b.str(JSON.stringify(bl.input ?? {})); return;
    case 'tool_result': {
      b.u8(3); b.str(bl.tool_use_id); b.u8(bl.is_error ? 1 : 0);
      const c = bl.content === undefined ? [] : blocksOf(bl.content);
      b.uvarint(c.length);
      for (const x of c) encodeBlock(b, x);
      return;
    }
    default:
      throw new RangeError(`layer0: unknown block type ${bl.type}`);
  }
}

function encodeV2(req, output) {
  const b = new Builder();
  b.bytes(MAGIC);
  b.u8(2);
  b.str(req.model);
  b.uvarint(req.max_tokens);
  b.uvarint(req.messages.length);
  for (const m of req.messages) {
    b.u8(m.role === 'assistant' ? 1 : 0);
    const blocks = blocksOf(m.content);
    b.uvarint(blocks.length);
    for (const bl of blocks) encodeBlock(b, bl);
  }
  const param = (tag, fill) => {
    const v = new Builder();
    fill(v);
    const bytes = v.result();
    b.u8(tag);
    b.uvarint(bytes.length);
    b.bytes(bytes);
  };
  for (const s of systemBlocks(req.system)) param(0x01, (v) => v.bytes(utf8.encode(s)));
  if (req.temperature != null) param(0x02, (v) => v.f64(req.temperature));
  if (req.top_p != null) param(0x03, (v) => v.f64(req.top_p));
  if (req.top_k != null) param(0x04, (v) => v.uvarint(req.top_k));
  for (const s of req.stop_sequences ?? []) param(0x05, (v) => v.bytes(utf8.encode(s)));
  for (const t of req.tools ?? []) {
    param(0x06, (v) => { v.str(t.name); v.str(t.description ?? ''); v.str(JSON.stringify(t.input_schema)); });
  }
  const tc = req.tool_choice;
  if (tc && !(tc.type === 'auto' && !tc.disable_parallel_tool_use)) {
    param(0x07, (v) => {
      const type = ['auto', 'any', 'tool', 'none'].indexOf(tc.type);
      if (type < 0) throw new RangeError(`layer0: unknown tool_choice type ${tc.type}`);
      v.u8(type);
      if (tc.type === 'tool') v.str(tc.name);
      v.u8(tc.disable_parallel_tool_use ? 1 : 0);
    });
  }
  if (req.metadata?.user_id) param(0x08, (v) => v.bytes(utf8.encode(req.metadata.user_id)));
  if (output === 'text') param(0x09, (v) => v.u8(1));
  return b.result();
}

/** The request headers for a version. */
export function requestHeaders(version = 1) {
  return { 'Content-Type': version === 1 ? MEDIA_TYPE : `${MEDIA_TYPE}; version=${version}` };
}

// ---------------------------------------------------------------------------------------------
// Frames

/**
 * Splits a response byte stream into frames. push() chunks split anywhere; next() returns
 * {type, payload} for each complete frame, or null when it needs more bytes. The payload is a
 * view valid until the next push().
 */
export class FrameDecoder {
  constructor(version) {
    if (version !== 1 && version !== 2) throw new RangeError(`layer0: unsupported version ${version}`);
    this.version = version;
    this.buf = new Uint8Array(4096);
    this.r = 0; // unread bytes are buf[r:w]
    this.w = 0;
    this.header = false;
    this.done = false;
    this.offset = 0;
  }

  push(chunk) {
    const unread = this.w - this.r;
    if (this.w + chunk.length > this.buf.length) {
      if (unread + chunk.length <= this.buf.length) {
        this.buf.copyWithin(0, this.r, this.w);
      } else {
        const b = new Uint8Array(Math.max(unread + chunk.length, this.buf.length * 2));
        b.set(this.buf.subarray(this.r, this.w));
        this.buf = b;
      }
      this.r = 0;
      this.w = unread;
    }
    this.buf.set(chunk, this.w);
    this.w += chunk.length;
  }

  get buffered() { return this.w - this.r; }

  consume(n) {
    this.r += n;
    this.offset += n;
    if (this.r === this.w) { this.r = 0; this.w = 0; }
  }

  next() {
    const b = this.buf;
    let avail = this.w - this.r;
    if (this.done) {
      if (avail > 0) throw new ProtocolError(`${avail} bytes after the done frame`);
      return null;
    }
    if (!this.header) {
      const want = this.version === 1 ? MAGIC : [...MAGIC, this.version];
      for (let i = 0; i < avail && i < want.length; i++) {
        if (b[this.r + i] !== want[i]) {
          throw new ProtocolError(`bad stream magic: byte ${i} is 0x${b[this.r + i].toString(16)}, want 0x${want[i].toString(16)}`);
        }
      }
      if (avail < want.length) return null;
      this.header = true;
      this.consume(want.length);
      avail = this.w - this.r;
    }
    const p = this.r;
    if (avail < 2) return null;
    const type = b[p];
    let n;
    let hl;
    if (this.version === 1) {
      if (avail < 3) return null;
      if (type > FrameType.DONE) throw new ProtocolError(`unknown frame type ${type} at offset ${this.offset}`);
      n = b[p + 1] << 8 | b[p + 2];
      hl = 3;
    } else {
      n = 0;
      let mul = 1;
      let i = 1;
      for (;; i++) {
        if (i > 5) throw new ProtocolError(`frame length at offset ${this.offset} too large`);
        if (i >= avail) return null;
        const c = b[p + i];
        n += (c & 0x7f) * mul;
        mul *= 0x80;
        if (c < 0x80) {
          if (c === 0 && i > 1) throw new ProtocolError(`non-minimal frame length at offset ${this.offset}`);
          break;
        }
      }
      if (n > MAX_PAYLOAD_V2) throw new ProtocolError(`frame of ${n} bytes at offset ${this.offset} exceeds ${MAX_PAYLOAD_V2}`);
      hl = i + 1;
    }
    if (avail < hl + n) return null;
    const payload = b.subarray(p + hl, p + hl + n);
    if (type === FrameType.DONE) {
      if (n !== 0) throw new ProtocolError(`done frame with ${n} payload bytes`);
      this.done = true;
    }
    this.consume(hl + n);
    return { type, payload };
  }
}

/** Reads uvarints and strs from a version-2 payload. */
class PayloadReader {
  constructor(p) { this.p = p; this.i = 0; }
  get rest() { return this.p.subarray(this.i); }
  uvarint() {
    let v = 0;
    let mul = 1;
    for (let k = 0; k < 10; k++) {
      if (this.i >= this.p.length) throw new ProtocolError('malformed frame payload');
      const c = this.p[this.i++];
      v += (c & 0x7f) * mul;
      mul *= 0x80;
      if (c < 0x80) return v;
    }
    throw new ProtocolError('malformed frame payload');
  }
  bytes() {
    const n = this.uvarint();
    if (this.i + n > this.p.length) throw new ProtocolError('malformed frame payload');
    const b = this.p.subarray(this.i, this.i + n);
    this.i += n;
    return b;
  }
  end(frame) {
    if (this.i !== this.p.length) throw new ProtocolError(`malformed ${frame} frame`);
  }
}

const u32 = (p, i) => (p[i] << 24 >>> 0) + (p[i + 1] << 16 | p[i + 2] << 8 | p[i + 3]);

function cacheHitRatio(u) {
  const total = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
  return total === 0 ? 0 : Math.floor(u.cache_read_input_tokens * 100000 / total);
}

// ---------------------------------------------------------------------------------------------
// Vocabulary

/** A wire vocabulary: token ID → bytes. */
export class Vocab {
  /** Parses the serialized form served at /v1/binary/vocab/{hash}. */
  static parse(bytes, hash = '') {
    const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    if (b.length < 9 || b[0] !== 0x4c || b[1] !== 0x30 || b[2] !== 0x56 || b[3] !== 0x43) {
      throw new ProtocolError('not a vocabulary (bad magic)');
    }
    if (b[4] !== 1) throw new ProtocolError(`vocabulary format ${b[4]}, want 1`);
    const count = u32(b, 5);
    const offs = new Uint32Array(count + 1);
    let p = 9;
    for (let i = 0; i < count; i++) {
      if (p >= b.length || b[p] === 0 || p + 1 + b[p] > b.length) throw new ProtocolError(`vocabulary entry ${i} at offset ${p} is malformed`);
      offs[i] = p;
      p += 1 + b[p];
    }
    if (p !== b.length) throw new ProtocolError(`vocabulary has ${b.length - p} trailing bytes`);
    offs[count] = p;
    const v = new Vocab();
    v.data = b;
    v.offs = offs;
    v.hash = hash;
    return v;
  }

  get length() { return this.offs.length - 1; }

  /** The bytes of entry id (a view), or undefined when out of range. */
  bytes(id) {
    if (id >= this.length) return undefined;
    return this.data.subarray(this.offs[id] + 1, this.offs[id + 1]);
  }
}

const vocabCache = new Map(); // base URL + hash → Promise<Vocab>

/** Fetches (once per base URL and hash) the vocabulary a stream names in X-Binary-Vocab. */
export function fetchVocab(baseURL, hash, { fetch: fetchFn = globalThis.fetch, signal } = {}) {
  const key = `${baseURL}|${hash}`;
  let p = vocabCache.get(key);
  if (!p) {
    p = (async () => {
      const res = await fetchFn(`${baseURL}/v1/binary/vocab/${hash}`, { signal });
      if (!res.ok) throw await httpError(res);
      return Vocab.parse(new Uint8Array(await res.arrayBuffer()), hash);
    })();
    p.catch(() => vocabCache.delete(key));
    vocabCache.set(key, p);
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Events

/**
 * Turns frames into events: {type:'start', id, model, usage}, {type:'block_start', index,
 * block:'text'|'tool_use', id, name}, {type:'text', index, text}, {type:'tool_input', index,
 * json}, {type:'block_stop', index}, {type:'stop', stop_reason, stop_sequence}, {type:'usage',
 * usage}, {type:'error', error} (a BinaryError: the server's error frame; done follows),
 * {type:'done'}. Text holds whole characters: bytes of a character split across frames wait for
 * the rest. Version 1 has no start, block or stop frames: they are synthesized (one text block;
 * stop reason max_tokens when the usage's output tokens reach maxTokens, the request's
 * max_tokens, else end_turn — a version-1 request has no stop sequences or tools). A stream that cannot be decoded throws a ProtocolError. Unknown version-2 frames are
 * skipped.
 */
export class EventDecoder {
  constructor(version, vocab = null, maxTokens = 0) {
    this.version = version;
    this.vocab = vocab;
    this.maxTokens = maxTokens;
    this.frames = new FrameDecoder(version);
    this.started = false;
    this.index = -1;
    this.open = false;
    this.text = null; // TextDecoder of the open text block
  }

  /** Adds bytes and returns the events of every frame they complete. */
  push(chunk) {
    this.frames.push(chunk);
    const out = [];
    for (let f; (f = this.frames.next()) !== null;) this.frame(f, out);
    return out;
  }

  /** Reports whether the done frame was seen. */
  get done() { return this.frames.done; }

  startEvent(out) {
    if (this.started) return;
    this.started = true;
    out.push({ type: 'start', id: '', model: '', usage: null });
  }

  openBlock(out, block, id = '', name = '') {
    this.closeBlock(out);
    this.startEvent(out);
    this.index++;
    this.open = true;
    this.text = block === 'text' ? new TextDecoder('utf-8', { fatal: false }) : null;
    const ev = { type: 'block_start', index: this.index, block };
    if (block === 'tool_use') Object.assign(ev, { id, name });
    out.push(ev);
  }

  closeBlock(out) {
    if (!this.open) return;
    if (this.text) {
      const rest = this.text.decode();
      if (rest) out.push({ type: 'text', index: this.index, text: rest });
    }
    this.open = false;
    this.text = null;
    out.push({ type: 'block_stop', index: this.index });
  }

  textBytes(out, bytes) {
    if (!this.open || !this.text) this.openBlock(out, 'text');
    const s = this.text.decode(bytes, { stream: true });
    if (s) out.push({ type: 'text', index: this.index, text: s });
  }

  frame(f, out) {
    const p = f.payload;
    const v1 = this.version === 1;
    switch (f.type) {
      case FrameType.TOKEN: {
        if (!this.vocab) throw new ProtocolError('token frame without a vocabulary');
        const ids = [];
        if (v1) {
          if (p.length % 2) throw new ProtocolError('token frame of odd length');
          for (let i = 0; i < p.length; i += 2) ids.push(p[i] << 8 | p[i + 1]);
        } else {
          const r = new PayloadReader(p);
          while (r.i < p.length) ids.push(r.uvarint());
        }
        let n = 0;
        const parts = ids.map((id) => {
          const b = this.vocab.bytes(id);
          if (!b) throw new ProtocolError(`token ID ${id} is not in the vocabulary (${this.vocab.length} entries)`);
          n += b.length;
          return b;
        });
        const bytes = new Uint8Array(n);
        let k = 0;
        for (const b of parts) { bytes.set(b, k); k += b.length; }
        this.textBytes(out, bytes);
        return;
      }
      case FrameType.USAGE: {
        let usage;
        if (v1) {
          if (p.length !== 12) throw new ProtocolError('usage frame of wrong length');
          usage = { input_tokens: u32(p, 0), output_tokens: u32(p, 4), cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0, cache_hit_ratio: u32(p, 8) };
        } else {
          const r = new PayloadReader(p);
          usage = { input_tokens: r.uvarint(), output_tokens: r.uvarint(),
            cache_creation_input_tokens: r.uvarint(), cache_read_input_tokens: r.uvarint() };
          r.end('usage');
          usage.cache_hit_ratio = cacheHitRatio(usage);
        }
        if (v1) {
          this.startEvent(out);
          this.closeBlock(out);
          const cut = this.maxTokens > 0 && usage.output_tokens >= this.maxTokens;
          out.push({ type: 'stop', stop_reason: cut ? 'max_tokens' : 'end_turn', stop_sequence: '' });
        }
        out.push({ type: 'usage', usage });
        return;
      }
      case FrameType.ERROR: {
        this.closeBlock(out);
        if (v1) {
          if (p.length < 2) throw new ProtocolError('short error frame');
          const status = p[0] << 8 | p[1];
          out.push({ type: 'error', error: new BinaryError(status, ERROR_TYPES[status] ?? 'api_error', '', new TextDecoder().decode(p.subarray(2))) });
          return;
        }
        const r = new PayloadReader(p);
        const status = r.uvarint();
        const type = new TextDecoder().decode(r.bytes());
        const code = new TextDecoder().decode(r.bytes());
        out.push({ type: 'error', error: new BinaryError(status, type, code, new TextDecoder().decode(r.rest)) });
        return;
      }
      case FrameType.DONE:
        this.closeBlock(out);
        out.push({ type: 'done' });
        return;
      default:
    }
    if (v1) return;
    switch (f.type) {
      case FrameType.TEXT:
        this.textBytes(out, p);
        return;
      case FrameType.START: {
        const r = new PayloadReader(p);
        const dec = new TextDecoder();
        const id = dec.decode(r.bytes());
        const model = dec.decode(r.bytes());
        const usage = { input_tokens: r.uvarint(), cache_creation_input_tokens: r.uvarint(), cache_read_input_tokens: r.uvarint() };
        r.end('start');
        this.started = true;
        out.push({ type: 'start', id, model, usage });
        return;
      }
      case FrameType.BLOCK_START: {
        if (p.length === 0) throw new ProtocolError('empty block_start frame');
        if (p[0] === 0) { this.openBlock(out, 'text'); return; }
        if (p[0] !== 1) throw new ProtocolError(`block kind ${p[0]}`);
        const r = new PayloadReader(p.subarray(1));
        const dec = new TextDecoder();
        const id = dec.decode(r.bytes());
        const name = dec.decode(r.bytes());
        r.end('block_start');
        this.openBlock(out, 'tool_use', id, name);
        return;
      }
      case FrameType.TOOL_INPUT:
        if (!this.open) throw new ProtocolError('tool_input frame outside a block');
        out.push({ type: 'tool_input', index: this.index, json: new TextDecoder().decode(p) });
        return;
      case FrameType.BLOCK_STOP:
        this.closeBlock(out);
        return;
      case FrameType.STOP:
        if (p.length === 0 || p[0] >= STOP_REASONS.length) throw new ProtocolError('malformed stop frame');
        out.push({ type: 'stop', stop_reason: STOP_REASONS[p[0]], stop_sequence: new TextDecoder().decode(p.subarray(1)) });
        return;
      default:
        // A frame type this client does not know: skipped (docs/protocol.md, versioning rules).
    }
  }
}

/**
 * Decodes a response body (a ReadableStream of Uint8Array, or any async iterable of them) into
 * events, as an async iterator (without the error event: an error frame throws its BinaryError,
 * after the events before it). Throws ProtocolError for a stream that cannot be decoded or ends
 * before its done frame.
 */
export async function* decodeStream(body, { version = 1, vocab = null, maxTokens = 0 } = {}) {
  const dec = new EventDecoder(version, vocab, maxTokens);
  const reader = body.getReader ? body.getReader() : null;
  const chunks = reader ? null : body[Symbol.asyncIterator]();
  try {
    for (;;) {
      const { done, value } = reader ? await reader.read() : await chunks.next();
      if (done) break;
      for (const ev of dec.push(value)) {
        if (ev.type === 'error') throw ev.error;
        yield ev;
      }
      if (dec.done) return;
    }
  } finally {
    if (reader && !dec.done) await reader.cancel().catch(() => {});
    if (reader) reader.releaseLock();
  }
  if (!dec.done) throw new ProtocolError('stream ended before the done frame');
}

async function httpError(res) {
  let type = ERROR_TYPES[res.status] ?? 'api_error';
  let message = `HTTP ${res.status}`;
  try {
    const body = await res.json();
    if (body?.error) { type = body.error.type ?? type; message = body.error.message ?? message; }
  } catch { /* not JSON */ }
  return new BinaryError(res.status, type, res.headers.get('X-Error-Code') ?? '', message);
}

/**
 * Sends a request and yields its events. Options: version (1 or 2), output ('tokens' or 'text',
 * version 2), apiKey, headers, signal (an AbortSignal: aborting closes the connection, which
 * stops the generation on the server), fetch (to override the global), vocab (a Vocab to use
 * instead of fetching the one the response names).
 */
export async function* stream(baseURL, request, opts = {}) {
  const { version = 1, output = 'tokens', apiKey, headers = {}, signal, fetch: fetchFn = globalThis.fetch } = opts;
  const base = baseURL.replace(/\/+$/, '');
  const h = { ...requestHeaders(version), ...headers };
  if (apiKey) h['x-api-key'] = apiKey;
  const res = await fetchFn(`${base}/v1/messages`, { method: 'POST', headers: h, body: encodeRequest(request, { version, output }), signal });
  if (!res.ok) throw await httpError(res);
  let vocab = opts.vocab ?? null;
  const hash = res.headers.get('X-Binary-Vocab');
  if (!vocab && !(version === 2 && output === 'text')) {
    if (!hash) throw new ProtocolError('the response names no vocabulary (X-Binary-Vocab)');
    vocab = await fetchVocab(base, hash, { fetch: fetchFn, signal });
  }
  yield* decodeStream(res.body, { version, vocab, maxTokens: request.max_tokens ?? 0 });
}

/**
 * Collects events into a message: {id, model, content, stop_reason, stop_sequence, usage,
 * error}. An error frame does not throw here: what arrived is kept and error is set
 * ({status, type, code, message}).
 */
export async function collect(events) {
  const msg = { id: '', model: '', content: [], stop_reason: '', stop_sequence: '', usage: null, error: null };
  try {
    for await (const ev of events) {
      switch (ev.type) {
        case 'start': msg.id = ev.id; msg.model = ev.model; break;
        case 'block_start':
          msg.content[ev.index] = ev.block === 'text' ? { type: 'text', text: '' } : { type: 'tool_use', id: ev.id, name: ev.name, input: '' };
          break;
        case 'text': msg.content[ev.index].text += ev.text; break;
        case 'tool_input': msg.content[ev.index].input += ev.json; break;
        case 'stop': msg.stop_reason = ev.stop_reason; msg.stop_sequence = ev.stop_sequence; break;
        case 'usage': msg.usage = ev.usage; break;
        default:
      }
    }
  } catch (e) {
    if (!(e instanceof BinaryError)) throw e;
    msg.error = { status: e.status, type: e.type, code: e.code, message: e.message };
    msg.stop_reason = '';
    msg.usage = null;
  }
  return msg;
}
