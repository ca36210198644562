package cache

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"sync"
	"unicode/utf8"

	"github.com/zeebo/xxh3"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// Key identifies an answer: the 128-bit XXH3 hash of the canonical encoding of everything in a
// request that can change the answer (Encode). XXH3 is not a cryptographic hash: two different
// encodings can share a key, by chance or by design. So an entry keeps the encoding it was
// stored under and a lookup compares it (Model.Get), and only the same encoding joins a flight
// (Model.Join): a collision costs a miss, never another request's answer. (SHA-256, which
// needed no comparison, took 10.5 µs of the 2,000-token key; XXH3 and the comparison take
// under 1 µs.)
type Key [16]byte

// String returns the key in hex.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// keyVersion starts every encoding: a change of the encoding changes it, so keys of an older
// layout (in a shared store) never match.
const keyVersion = "layer0-cache-5\x00"

// Canon is a request's canonical encoding and its key, in a pooled buffer: Release it when done
// with Bytes (after the flight it leads has finished).
type Canon struct {
	Key   Key
	Bytes []byte
	// Tenant is whose answer it is (Model.Tenant): the in-memory store's budget is shared
	// fairly among tenants.
	Tenant string
}

// canons pools Canons with their buffers.
var canons = sync.Pool{New: func() any { return &Canon{Bytes: make([]byte, 0, 16<<10)} }}

// Release returns c to the pool; c must not be used after it.
func (c *Canon) Release() {
	if cap(c.Bytes) <= 1<<20 {
		c.Bytes, c.Tenant = c.Bytes[:0], ""
		canons.Put(c)
	}
}

// KeyOf returns the key of r answered by model for tenant (see Encode).
func KeyOf(tenant, model string, r *llm.Request) Key {
	c := Encode(tenant, model, r)
	k := c.Key
	c.Release()
	return k
}

// Truncate is a request's truncate directive, which the request a key is taken from no longer
// shows: context planning runs after the lookup and cuts the input the engine is sent, to the
// model's context window or to Budget tokens. Two requests equal but for it are sent different
// inputs, or one is cut and the other refused, so it is part of the key. The zero value is no
// directive.
type Truncate struct {
	// On is set when the directive was given: an input too large is cut, not refused.
	On bool
	// Budget is the directive's budget in input tokens; 0 is the context window.
	Budget int
}

// EncodeTruncated is Encode of a request that carried the truncate directive t.
func EncodeTruncated(tenant, model string, r *llm.Request, t Truncate) *Canon {
	c := encode(tenant, model, r)
	b := appendBool(c.Bytes, t.On)
	b = binary.AppendVarint(b, int64(t.Budget))
	c.Bytes = b
	c.Key = xxh3.Hash128(b).Bytes()
	return c
}

// Encode returns the canonical encoding of r answered by model, the canonical model name
// (aliases resolved), for tenant (Model.Tenant: the API key's name, or "" where every key shares
// the answers), and its key. The tenant comes first: two keys' answers never share a key, nor
// confirm each other's encoding.
//
// The encoding covers the model, the system blocks, every message with every field of its
// blocks (tool ids, tool inputs, images, tool results), the tools and the tool choice,
// max_tokens, temperature, top_p, top_k (each with whether it was given), the stop sequences and
// the response format (JSON mode, a schema).
// Every string and list is length-prefixed, so no two different requests encode the same. It
// leaves out what cannot change the answer: whether it streams, the client's format, the model
// name as the client spelled it, and metadata.user_id. JSON values (tool inputs and schemas) are
// encoded canonically — keys sorted, no insignificant space, escapes decoded — so the same value
// in any spelling is the same key. A request with a truncate directive is encoded with it
// (EncodeTruncated): Encode is that of a request without one.
func Encode(tenant, model string, r *llm.Request) *Canon {
	return EncodeTruncated(tenant, model, r, Truncate{})
}

// encode returns the canonical encoding of r answered by model for tenant, without its key.
func encode(tenant, model string, r *llm.Request) *Canon {
	c := canons.Get().(*Canon)
	c.Tenant = tenant
	b := append(c.Bytes[:0], keyVersion...)
	b = appendStr(b, tenant)
	b = appendStr(b, model)
	b = appendBlocks(b, r.System)
	b = binary.AppendUvarint(b, uint64(len(r.Messages)))
	for i := range r.Messages {
		m := &r.Messages[i]
		b = append(b, byte(m.Role))
		b = appendBlocks(b, m.Content)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Tools)))
	for i := range r.Tools {
		t := &r.Tools[i]
		b = appendStr(b, t.Name)
		b = appendStr(b, t.Description)
		b = appendJSON(b, t.InputSchema)
	}
	tc := &r.ToolChoice
	b = append(b, byte(tc.Type))
	b = appendStr(b, tc.Name)
	b = appendBool(b, tc.DisableParallelToolUse)
	b = binary.AppendVarint(b, int64(r.MaxTokens))
	b = appendFloat(b, r.Temperature)
	b = appendFloat(b, r.TopP)
	if r.TopK == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(*r.TopK))
	}
	b = binary.AppendUvarint(b, uint64(len(r.StopSequences)))
	for _, s := range r.StopSequences {
		b = appendStr(b, s)
	}
	rf := &r.ResponseFormat
	b = append(b, byte(rf.Type))
	if rf.Type == llm.ResponseJSONSchema {
		b = appendStr(b, rf.Name)
		b = appendJSON(b, rf.Schema)
		b = appendBool(b, rf.Strict)
	}
	c.Bytes = b
	return c
}

// embedKeyVersion starts the encoding of an embeddings request, so that it never equals a
// message request's. Version 2 added the tenant: version 1 keys, in a shared store, are never
// read again.
const embedKeyVersion = "layer0-embed-2\x00"

// EncodeEmbed returns the canonical encoding of the embeddings request r answered by model for
// tenant (Model.Tenant: the API key's name, or "" where every key shares the answers), and its
// key: the tenant, the model, every text in order, and the dimensions asked for. As in Encode
// the tenant comes first, so that one key's texts are never another key's hit. The answer's
// encoding (floats or base64) and the user are left out: they do not change the vectors.
func EncodeEmbed(tenant, model string, r *llm.EmbedRequest) *Canon {
	c := canons.Get().(*Canon)
	c.Tenant = tenant
	b := append(c.Bytes[:0], embedKeyVersion...)
	b = appendStr(b, tenant)
	b = appendStr(b, model)
	b = binary.AppendUvarint(b, uint64(len(r.Input)))
	for _, s := range r.Input {
		b = appendStr(b, s)
	}
	b = binary.AppendVarint(b, int64(r.Dimensions))
	c.Bytes = b
	c.Key = xxh3.Hash128(b).Bytes()
	return c
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendFloat(b []byte, f *float64) []byte {
	if f == nil {
		return append(b, 0)
	}
	v := *f
	if v == 0 {
		v = 0 // -0 and 0 are the same parameter
	}
	b = append(b, 1)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}

func appendBlocks(b []byte, bs []llm.Block) []byte {
	b = binary.AppendUvarint(b, uint64(len(bs)))
	for i := range bs {
		k := &bs[i]
		b = append(b, byte(k.Type))
		b = appendStr(b, k.Text)
		b = appendStr(b, k.MediaType)
		b = appendStr(b, k.Data)
		b = appendStr(b, k.URL)
		b = appendStr(b, k.ID)
		b = appendStr(b, k.Name)
		b = appendJSON(b, k.Input)
		b = appendStr(b, k.ToolUseID)
		b = appendBool(b, k.IsError)
		b = appendBlocks(b, k.Content)
	}
	return b
}

// appendJSON appends a JSON value in canonical form, length-prefixed. Objects are re-encoded
// with sorted keys (encoding/json sorts a map's keys; numbers keep their text); a value that is
// not valid JSON is appended as it is, tagged apart, so it can equal only itself.
func appendJSON(b []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(b, 0)
	}
	if c, ok := canonicalJSON(raw); ok {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(c)))
		return append(b, c...)
	}
	b = append(b, 2)
	b = binary.AppendUvarint(b, uint64(len(raw)))
	return append(b, raw...)
}

// canonicalJSON re-encodes raw with sorted keys. A value whose decoding would lose what the
// engine is sent — a lone UTF-16 surrogate escape (`\ud800`) or bytes that are not UTF-8, both
// decoded as U+FFFD, while the engine gets the raw JSON — has no canonical form: it equals only
// itself.
func canonicalJSON(raw []byte) ([]byte, bool) {
	if !utf8.Valid(raw) || jsontext.HasLoneSurrogate(raw) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return nil, false
	}
	c, err := json.Marshal(v)
	return c, err == nil
}
