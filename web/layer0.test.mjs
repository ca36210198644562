// Tests of web/layer0.js with Node's built-in runner: node --test web/
// They check the client against the repository's test vectors (testdata/binary/vectors.json) and
// against a live HTTP server on 127.0.0.1 that serves those vectors in small chunks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { once } from 'node:events';
import {
  BinaryError, EventDecoder, FrameDecoder, ProtocolError, Vocab, collect, decodeStream,
  encodeRequest, stream,
} from './layer0.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const vectors = JSON.parse(readFileSync(`${root}testdata/binary/vectors.json`, 'utf8'));
const vocabBytes = new Uint8Array(readFileSync(`${root}${vectors.vocab.file}`));
const vocab = Vocab.parse(vocabBytes, vectors.vocab.hash);

const fromHex = (h) => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
const toHex = (b) => Buffer.from(b).toString('hex');
const normal = (m) => ({ ...m, content: m.content ?? [] });

async function* chunksOf(bytes, cuts) {
  let i = 0;
  for (const c of [...cuts, bytes.length]) {
    yield bytes.subarray(i, c);
    i = c;
  }
}

function vocabFor(v) { return v.output === 'text' ? null : vocab; }

test('the vocabulary file parses to the advertised size', () => {
  assert.equal(vocab.length, vectors.vocab.entries);
  assert.equal(new TextDecoder().decode(vocab.bytes(9906)), 'Hello');
  assert.equal(vocab.bytes(vocab.length), undefined);
  assert.throws(() => Vocab.parse(new Uint8Array([1, 2, 3])), ProtocolError);
});

test('every request vector encodes byte for byte', () => {
  for (const v of vectors.requests) {
    const got = encodeRequest(v.request, { version: v.version, output: v.output });
    assert.equal(toHex(got), v.hex, v.name);
  }
});

test('version 1 refuses what it cannot carry', () => {
  const base = { model: 'sim', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] };
  for (const extra of [{ temperature: 1 }, { tools: [] }, { stop_sequences: ['x'] }, { max_tokens: 70000 }]) {
    assert.throws(() => encodeRequest({ ...base, ...extra }, { version: 1 }), /use version 2/);
    encodeRequest({ ...base, ...extra, tools: extra.tools ?? undefined }, { version: 2 });
  }
  // A string content and a string system are accepted in both versions.
  const withSystem = { ...base, system: 'Be brief.' };
  const body = encodeRequest(withSystem, { version: 1 });
  assert.deepEqual([...body.subarray(8, 10)], [2, 2]); // two messages, the system one first
});

test('every stream vector decodes to its expected message', async () => {
  for (const v of vectors.streams) {
    const got = await collect(decodeStream(chunksOf(fromHex(v.hex), []), { version: v.version, vocab: vocabFor(v) }));
    assert.deepEqual(got, normal(v.expect), v.name);
  }
});

test('a stream split at every byte boundary decodes the same', async () => {
  for (const v of vectors.streams) {
    const bytes = fromHex(v.hex);
    const whole = await collect(decodeStream(chunksOf(bytes, []), { version: v.version, vocab: vocabFor(v) }));
    for (let cut = 0; cut <= bytes.length; cut++) {
      const got = await collect(decodeStream(chunksOf(bytes, [cut]), { version: v.version, vocab: vocabFor(v) }));
      assert.deepEqual(got, whole, `${v.name}: cut at ${cut}`);
    }
    const oneByte = await collect(decodeStream(chunksOf(bytes, [...bytes.keys()].slice(1)), { version: v.version, vocab: vocabFor(v) }));
    assert.deepEqual(oneByte, whole, `${v.name}: one byte per chunk`);
  }
});

test('text events hold whole characters', () => {
  const v = vectors.streams.find((s) => s.name === 'v1 UTF-8 split across frames');
  const bytes = fromHex(v.hex);
  const dec = new EventDecoder(1, vocab);
  const texts = [];
  for (let i = 0; i < bytes.length; i++) {
    for (const ev of dec.push(bytes.subarray(i, i + 1))) if (ev.type === 'text') texts.push(ev.text);
  }
  assert.deepEqual(texts, ['你']);
});

test('the frame decoder refuses malformed streams', () => {
  const cases = [
    [1, [0x41, 0x4e, 0x54, 0x58], /bad stream magic/],
    [1, [0x41, 0x4e, 0x54, 0x48, 7, 0, 0], /unknown frame type 7/],
    [2, [0x41, 0x4e, 0x54, 0x48, 2, 0, 0x80, 0x80, 0x80, 0x10], /exceeds/],
    [2, [0x41, 0x4e, 0x54, 0x48, 2, 0, 0x80, 0x00], /non-minimal/],
    [1, [0x41, 0x4e, 0x54, 0x48, 3, 0, 0, 0], /after the done frame/],
  ];
  for (const [version, bytes, want] of cases) {
    const d = new FrameDecoder(version);
    d.push(Uint8Array.from(bytes));
    assert.throws(() => { while (d.next()); }, want);
  }
});

test('a stream that ends early is an error', async () => {
  const v = vectors.streams[0];
  const bytes = fromHex(v.hex);
  await assert.rejects(collect(decodeStream(chunksOf(bytes.subarray(0, bytes.length - 3), []), { version: 1, vocab })), ProtocolError);
});

// A server on 127.0.0.1 serving the stream vectors in 3-byte chunks, the vocabulary, and a 400.
async function withServer(fn) {
  const hits = { vocab: 0, closed: 0 };
  const server = createServer((req, res) => {
    if (req.url === `/v1/binary/vocab/${vectors.vocab.hash}`) {
      hits.vocab++;
      res.writeHead(200, { 'Content-Type': 'application/x-layer0-vocab', 'Cache-Control': 'public, max-age=31536000, immutable' });
      res.end(vocabBytes);
      return;
    }
    const body = [];
    req.on('data', (c) => body.push(c));
    req.on('end', () => {
      const name = req.headers['x-test-stream'];
      if (name === 'invalid') {
        res.writeHead(400, { 'Content-Type': 'application/json', 'X-Error-Code': 'INVALID_BINARY' });
        res.end(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'binary: offset 0: magic: bad' } }));
        return;
      }
      if (name === 'endless') {
        res.writeHead(200, { 'Content-Type': 'application/x-anthropic-binary', 'X-Binary-Vocab': vectors.vocab.hash });
        res.write(Uint8Array.from([0x41, 0x4e, 0x54, 0x48]));
        const timer = setInterval(() => res.write(Uint8Array.from([0, 0, 2, 0x26, 0xb2])), 5);
        res.on('close', () => { clearInterval(timer); hits.closed++; });
        return;
      }
      const v = vectors.streams.find((s) => s.name === name);
      const bytes = fromHex(v.hex);
      res.writeHead(200, {
        'Content-Type': v.version === 1 ? 'application/x-anthropic-binary' : 'application/x-anthropic-binary; version=2',
        'X-Binary-Vocab': vectors.vocab.hash,
      });
      let i = 0;
      const step = () => {
        if (i >= bytes.length) { res.end(); return; }
        res.write(bytes.subarray(i, i + 3));
        i += 3;
        setImmediate(step);
      };
      step();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    await fn(`http://127.0.0.1:${server.address().port}`, hits);
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

const hello = { model: 'sim', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] };

test('stream() over HTTP: events, vocabulary fetched once, errors, abort', async () => {
  await withServer(async (base, hits) => {
    for (const name of ['v1 one token per frame', 'v1 coalesced']) {
      const v = vectors.streams.find((s) => s.name === name);
      const got = await collect(stream(base, hello, { version: 1, headers: { 'X-Test-Stream': name } }));
      assert.deepEqual(got, normal(v.expect), name);
    }
    assert.equal(hits.vocab, 1, 'the vocabulary is fetched once per hash');

    const v2 = vectors.streams.find((s) => s.name === 'v2 text output with a tool call');
    const got = await collect(stream(base, hello, { version: 2, output: 'text', headers: { 'X-Test-Stream': v2.name } }));
    assert.deepEqual(got, normal(v2.expect));

    await assert.rejects(
      stream(base, hello, { headers: { 'X-Test-Stream': 'invalid' } }).next(),
      (e) => e instanceof BinaryError && e.status === 400 && e.code === 'INVALID_BINARY' && /offset 0/.test(e.message),
    );
    const failed = await collect(stream(base, hello, { headers: { 'X-Test-Stream': 'invalid' } }));
    assert.equal(failed.error.code, 'INVALID_BINARY');

    const ac = new AbortController();
    let tokens = 0;
    await assert.rejects((async () => {
      for await (const ev of stream(base, hello, { signal: ac.signal, headers: { 'X-Test-Stream': 'endless' } })) {
        if (ev.type === 'text' && ++tokens === 3) ac.abort();
      }
    })(), (e) => e.name === 'AbortError');
    for (let i = 0; i < 100 && hits.closed === 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(hits.closed, 1, 'aborting closes the connection, so the server stops');
  });
});

test('version 1 derives max_tokens from the usage and the request\'s max_tokens', async () => {
  const v = vectors.streams.find((s) => s.name === 'v1 one token per frame'); // 4 output tokens
  const decode = (maxTokens) => collect(decodeStream(chunksOf(fromHex(v.hex), []), { version: 1, vocab, maxTokens }));
  assert.equal((await decode(4)).stop_reason, 'max_tokens');
  assert.equal((await decode(5)).stop_reason, 'end_turn');
  assert.equal((await decode(0)).stop_reason, 'end_turn'); // max_tokens unknown
});
