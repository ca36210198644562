package tokenizer

import (
	"unicode/utf8"
	"unsafe"

	"github.com/layer0ai/layer0/internal/llm"
)

// A request's prompt is counted as if rendered in ChatML, the chat format of the cl100k_base
// models: each section framed by IMStart, a role token, a line break, the content and IMEnd.
//
//	tools (when any):  IMStart "tools" "\n"  then per tool: name "\n" description "\n" schema "\n"  IMEnd
//	system (when any): IMStart "system" "\n" text IMEnd
//	each message:      IMStart role "\n" blocks… IMEnd
//	the reply:         IMStart "assistant" "\n"
//
// Tools come first, then the system prompt, then the turns: the order in which a prefix cache
// sees them, so a conversation that grows only appends tokens. Blocks count as: text, its text;
// tool_use, its name and input JSON; tool_result, its content blocks; image, ImageTokens.
const (
	// SectionOverhead is the number of framing tokens of each section (tools, system, message).
	SectionOverhead = 4
	// ReplyOverhead is the number of tokens that open the reply.
	ReplyOverhead = 3
	// ImageTokens is what one image counts, whatever its size: about the cost of the largest
	// image the Anthropic API takes without downscaling (1.15 megapixels / 750 per token).
	ImageTokens = 1600
	// ImageID is the first of the pseudo token ids that stand for image content in
	// AppendRequest: an image appears as ImageTokens copies of ImageID plus a 24-bit hash of its
	// data or URL, so different images make different prefixes. Token returns "" for them.
	ImageID uint32 = 1 << 24
)

// Ordinary ids of the role names and the line break in cl100k_base.
const (
	idNewline   uint32 = 198
	idUser      uint32 = 882
	idAssistant uint32 = 78191
	idSystem    uint32 = 9125
	idTools     uint32 = 16297
)

// CountRequest returns the number of prompt tokens of r in the Default codec; see
// (*Codec).CountRequest.
func CountRequest(r *llm.Request) int { return Default().CountRequest(r) }

// CountRequest returns the number of tokens of r's prompt — tools, system prompt and messages,
// with the framing documented above — which is len(AppendRequest(nil, r)). It allocates nothing.
func (c *Codec) CountRequest(r *llm.Request) int {
	w := promptWriter{c: c, count: true}
	w.request(r)
	return w.n
}

// RequestBounds returns bounds on CountRequest(r) that cost a pass over r's blocks, not a
// tokenization: the framing and images exactly, and for each text of n bytes (after the
// replacement of bytes that are not UTF-8 by U+FFFD, 3 bytes each, as Count does)
//
//   - at most n tokens: every token, being a byte sequence of the vocabulary, holds at least one
//     byte, so no text has more tokens than bytes;
//   - at least ceil(n / MaxTokenBytes()) tokens: no token holds more bytes than the longest.
//
// Admission uses them to refuse a prompt too large for a token limit without tokenizing it.
func (c *Codec) RequestBounds(r *llm.Request) (lo, hi int) {
	w := promptWriter{c: c, bounds: true}
	w.request(r)
	return w.n + w.lo, w.n + w.hi
}

// AppendRequest appends the token ids of r's prompt, framing included, to dst. Engines with a
// prefix cache key their cache blocks on this sequence.
func (c *Codec) AppendRequest(dst []uint32, r *llm.Request) []uint32 {
	w := promptWriter{c: c, dst: dst}
	w.request(r)
	return w.dst
}

// promptWriter renders a request into token ids (dst), into a count (n), or with bounds into
// bounds on the count (n for the framing, lo and hi more for the texts), so that they can never
// disagree.
type promptWriter struct {
	c             *Codec
	count, bounds bool
	n, lo, hi     int
	dst           []uint32
}

func (w *promptWriter) id(id uint32) {
	if w.count || w.bounds {
		w.n++
		return
	}
	w.dst = append(w.dst, id)
}

func (w *promptWriter) text(s string) {
	switch {
	case w.bounds:
		n := len(s)
		if !utf8.ValidString(s) {
			n = len(validUTF8(s))
		}
		w.lo += (n + w.c.maxTok - 1) / w.c.maxTok
		w.hi += n
	case w.count:
		w.n += w.c.Count(s)
	default:
		w.dst = w.c.Encode(w.dst, s)
	}
}

func (w *promptWriter) open(role uint32) {
	w.id(IMStart)
	w.id(role)
	w.id(idNewline)
}

func (w *promptWriter) request(r *llm.Request) {
	if len(r.Tools) > 0 {
		w.open(idTools)
		for i := range r.Tools {
			t := &r.Tools[i]
			w.text(t.Name)
			w.id(idNewline)
			w.text(t.Description)
			w.id(idNewline)
			w.text(bytesString(t.InputSchema))
			w.id(idNewline)
		}
		w.id(IMEnd)
	}
	if len(r.System) > 0 {
		w.open(idSystem)
		w.blocks(r.System)
		w.id(IMEnd)
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		switch m.Role {
		case llm.RoleAssistant:
			w.open(idAssistant)
		case llm.RoleSystem:
			w.open(idSystem)
		default:
			w.open(idUser)
		}
		w.blocks(m.Content)
		w.id(IMEnd)
	}
	w.open(idAssistant)
}

func (w *promptWriter) blocks(bs []llm.Block) {
	for i := range bs {
		b := &bs[i]
		switch b.Type {
		case llm.BlockText:
			w.text(b.Text)
		case llm.BlockToolUse:
			w.text(b.Name)
			w.text(bytesString(b.Input))
		case llm.BlockToolResult:
			w.blocks(b.Content)
		case llm.BlockImage:
			w.image(b)
		}
	}
}

func (w *promptWriter) image(b *llm.Block) {
	if w.count || w.bounds {
		w.n += ImageTokens
		return
	}
	src := b.Data
	if src == "" {
		src = b.URL
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(src); i++ {
		h = (h ^ uint32(src[i])) * 16777619
	}
	id := ImageID | h&(1<<24-1)
	for range ImageTokens {
		w.dst = append(w.dst, id)
	}
}

// bytesString views b as a string without copying. Only for reading: the tokenizer neither
// keeps nor returns the string, and b is not modified while it runs.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
