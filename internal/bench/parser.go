package bench

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// A parser reads one response body, fed in whatever pieces the network delivers, and counts the
// tokens in it without decoding JSON or allocating: the load generator must stay cheaper than the
// server it measures. It recognises just enough of each format:
//
//   - Anthropic SSE: an "event: content_block_delta" whose data holds a "text_delta" is one token
//     event; message_delta's usage.output_tokens is the token count; "event: message_stop" ends
//     the stream; "event: error" is a stream error.
//   - OpenAI SSE: a "data:" chunk whose "content" is a non-empty string is one token event; a
//     usage chunk's completion_tokens is the token count; a chunk with a non-null "error" is a
//     stream error; "data: [DONE]" ends the stream.
//   - Binary (version 1 or 2, framed by internal/wire/binary's Decoder): each token ID of a token
//     frame, and each text frame, is one token event; the usage frame's output count is the token
//     count; an error frame is a stream error; the done frame ends the stream.
//   - JSON (not streamed): the whole body is kept and the usage's output_tokens (Anthropic) or
//     completion_tokens (OpenAI) is the token count; a complete body ends the response.
//
// Token events time the stream (first token, inter-token gaps); the count the server reports in
// its usage (the model's tokens) is what throughput and bytes per token are counted in, or the
// events when the stream reports no usage.
type parser struct {
	kind parserKind

	tokens int  // token events seen so far
	usage  int  // output tokens the response's usage reported; -1 until one is seen
	done   bool // the format's end marker was seen
	failed bool // an error event or frame was seen, or the body is not in the format
	broken bool // the body cannot be understood past this point
	// errMsg holds the start of the first error event's data or frame payload, for the report.
	errMsg []byte

	// SSE: the current line, kept up to maxLine bytes (enough to classify any event), and the
	// name of the current event.
	line  []byte
	event sseEvent

	// Binary: the frame decoder and the stream's version.
	bin    *binary.Decoder
	binVer binary.Version

	// JSON: the body, kept up to maxJSON bytes.
	body []byte
}

type parserKind uint8

const (
	parseAnthropicSSE parserKind = iota
	parseOpenAISSE
	parseBinary
	parseAnthropicJSON
	parseOpenAIJSON
)

// parserKindFor returns the parser for a client format.
func parserKindFor(f llm.Format, stream bool) parserKind {
	switch {
	case f == llm.FormatBinary:
		return parseBinary
	case f == llm.FormatOpenAI && stream:
		return parseOpenAISSE
	case f == llm.FormatOpenAI:
		return parseOpenAIJSON
	case stream:
		return parseAnthropicSSE
	}
	return parseAnthropicJSON
}

// streamed reports whether tokens arrive one by one (so TTFT and inter-token times mean something).
func (k parserKind) streamed() bool { return k <= parseBinary }

type sseEvent uint8

const (
	evNone sseEvent = iota
	evDelta
	evStop
	evError
	evMessageDelta
	evOther
)

const (
	maxLine   = 4 << 10
	maxJSON   = 1 << 20
	maxErrMsg = 200
)

// reset prepares the parser for a new response of the given kind (and binary version), keeping
// its buffers.
func (p *parser) reset(kind parserKind, v binary.Version) {
	*p = parser{kind: kind, usage: -1, line: p.line[:0], body: p.body[:0], errMsg: p.errMsg[:0], bin: p.bin, binVer: v}
	if kind == parseBinary {
		if p.bin == nil {
			p.bin = binary.NewDecoder(v)
		} else {
			p.bin.Reset(v)
		}
	}
}

// outputTokens is the response's token count: its usage's, or the token events counted.
func (p *parser) outputTokens() int {
	if p.usage >= 0 {
		return p.usage
	}
	return p.tokens
}

// feed consumes the next piece of the body and returns how many tokens it completed.
func (p *parser) feed(b []byte) int {
	before := p.tokens
	switch p.kind {
	case parseAnthropicSSE, parseOpenAISSE:
		p.feedSSE(b)
	case parseBinary:
		p.feedBinary(b)
	default:
		if room := maxJSON - len(p.body); room > 0 {
			p.body = append(p.body, b[:min(len(b), room)]...)
		}
	}
	return p.tokens - before
}

// finish is called at the end of the body and returns the tokens it completed (JSON's count, or
// a last SSE line that had no newline).
func (p *parser) finish() int {
	before := p.tokens
	switch p.kind {
	case parseAnthropicSSE, parseOpenAISSE:
		if len(p.line) > 0 {
			p.sseLine(p.line)
			p.line = p.line[:0]
		}
	case parseAnthropicJSON, parseOpenAIJSON:
		key := keyOutputTokens
		if p.kind == parseOpenAIJSON {
			key = keyCompletionTokens
		}
		if n, ok := jsonInt(p.body, key); ok {
			p.tokens, p.usage, p.done = n, n, true
		} else {
			p.failed = true
			p.setErr(p.body)
		}
	}
	return p.tokens - before
}

func (p *parser) setErr(b []byte) {
	if len(p.errMsg) == 0 {
		p.errMsg = append(p.errMsg, b[:min(len(b), maxErrMsg)]...)
	}
}

func (p *parser) feedSSE(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.appendLine(b)
			return
		}
		if len(p.line) == 0 {
			p.sseLine(b[:i])
		} else {
			p.appendLine(b[:i])
			p.sseLine(p.line)
			p.line = p.line[:0]
		}
		b = b[i+1:]
	}
}

// appendLine keeps the first maxLine bytes of a line split across pieces.
func (p *parser) appendLine(b []byte) {
	if room := maxLine - len(p.line); room > 0 {
		p.line = append(p.line, b[:min(len(b), room)]...)
	}
}

var (
	prefixEvent = []byte("event:")
	prefixData  = []byte("data:")
	keyType     = []byte(`"type"`)
	keyContent  = []byte(`"content"`)
	keyError    = []byte(`"error"`)
	// textDelta finds `"text_delta"` by its tail: bytes.Index looks for the needle's first byte
	// first, and 'x' is rare in these events where '"' is everywhere: the reader got 1.5x faster.
	textDelta           = []byte(`xt_delta"`)
	keyOutputTokens     = []byte(`"output_tokens"`)
	keyCompletionTokens = []byte(`"completion_tokens"`)
	doneMarker          = []byte("[DONE]")
)

// sseLine handles one complete line (without its '\n').
func (p *parser) sseLine(l []byte) {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	switch {
	case len(l) == 0:
		p.event = evNone // a blank line ends the event
	case bytes.HasPrefix(l, prefixEvent):
		p.event = eventName(bytes.TrimSpace(l[len(prefixEvent):]))
		if p.event == evError {
			p.failed = true
		}
	case bytes.HasPrefix(l, prefixData):
		data := bytes.TrimSpace(l[len(prefixData):])
		if p.kind == parseOpenAISSE {
			p.openAIData(data)
		} else {
			p.anthropicData(data)
		}
	}
}

func eventName(name []byte) sseEvent {
	switch string(name) {
	case "content_block_delta":
		return evDelta
	case "message_stop":
		return evStop
	case "error":
		return evError
	case "message_delta":
		return evMessageDelta
	}
	return evOther
}

func (p *parser) anthropicData(data []byte) {
	ev := p.event
	if ev == evNone { // no event line: the payload's first "type" names the event
		if v, ok := jsonString(data, keyType); ok {
			ev = eventName(v)
		}
	}
	switch ev {
	case evDelta:
		if bytes.Contains(data, textDelta) {
			p.tokens++
		}
	case evMessageDelta:
		if n, ok := jsonInt(data, keyOutputTokens); ok {
			p.usage = n
		}
	case evStop:
		p.done = true
	case evError:
		p.failed = true
		p.setErr(data)
	}
}

func (p *parser) openAIData(data []byte) {
	// Most chunks carry a token: find it first and stop, so that a chunk costs one scan.
	if s, ok := jsonString(data, keyContent); ok && len(s) > 0 {
		p.tokens++
		return
	}
	if bytes.Equal(data, doneMarker) {
		p.done = true
		return
	}
	if v, ok := jsonValue(data, keyError); ok && !bytes.HasPrefix(v, []byte("null")) {
		p.failed = true
		p.setErr(data)
		return
	}
	if n, ok := jsonInt(data, keyCompletionTokens); ok {
		p.usage = n
	}
}

func (p *parser) feedBinary(b []byte) {
	if p.broken {
		return
	}
	_, _ = p.bin.Write(b)
	for {
		f, ok, err := p.bin.Next()
		if err != nil {
			p.failed, p.broken = true, true
			p.setErr([]byte(binaryErrText(err)))
			return
		}
		if !ok {
			return
		}
		switch f.Type {
		case binary.FrameToken:
			if p.binVer == binary.V1 {
				p.tokens += len(f.Payload) / 2 // uint16 IDs
			} else {
				for _, c := range f.Payload { // uvarint IDs: each ends with a byte below 0x80
					if c < 0x80 {
						p.tokens++
					}
				}
			}
		case binary.FrameText:
			p.tokens++
		case binary.FrameUsage:
			if u, err := binary.ParseUsage(p.binVer, f.Payload); err == nil {
				p.usage = u.OutputTokens
			}
		case binary.FrameError:
			p.failed = true
			if e, err := binary.ParseError(p.binVer, f.Payload); err == nil {
				p.setErr([]byte(fmt.Sprintf("error frame: status %d: %s", e.Status(), e.Message)))
			} else {
				p.setErr(f.Payload)
			}
		case binary.FrameDone:
			p.done = true
		}
	}
}

// binaryErrText names a frame decoding error by its kind alone, so that the report groups
// them and the text does not depend on where the network cut the stream.
func binaryErrText(err error) string {
	for _, e := range []error{binary.ErrBadMagic, binary.ErrFrameTooLarge, binary.ErrUnknownFrame,
		binary.ErrAfterDone, binary.ErrPayload} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}

// setErrPart gathers an error body, which may arrive in pieces.
func (p *parser) setErrPart(b []byte) {
	if room := maxErrMsg - len(p.errMsg); room > 0 {
		p.errMsg = append(p.errMsg, b[:min(len(b), room)]...)
	}
}

// jsonValue returns the bytes after `key:` (spaces skipped) at the first place key occurs in b.
// It does not parse JSON: a key inside a string value would match too, which the formats read
// here never produce.
func jsonValue(b, key []byte) ([]byte, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return nil, false
	}
	b = skipSpace(b[i+len(key):])
	if len(b) == 0 || b[0] != ':' {
		return nil, false
	}
	return skipSpace(b[1:]), true
}

// jsonString returns the raw (still escaped) string value of key.
func jsonString(b, key []byte) ([]byte, bool) {
	v, ok := jsonValue(b, key)
	if !ok || len(v) == 0 || v[0] != '"' {
		return nil, false
	}
	v = v[1:]
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			i++
		case '"':
			return v[:i], true
		}
	}
	return nil, false
}

// jsonInt returns the non-negative integer value of key.
func jsonInt(b, key []byte) (int, bool) {
	v, ok := jsonValue(b, key)
	if !ok {
		return 0, false
	}
	n, digits := 0, 0
	for _, c := range v {
		if c < '0' || c > '9' || digits > 12 {
			break
		}
		n = n*10 + int(c-'0')
		digits++
	}
	return n, digits > 0
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}
