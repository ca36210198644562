package binary

import (
	ebin "encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// Request layouts (docs/protocol.md has the tables and test vectors).
//
// Version 1, every integer big-endian:
//
//	"ANTH" | model_len u8 | model | count u8 | count × (role u8 | len u16 | content) | max_tokens u16
//
// Roles 0 user, 1 assistant, 2 system (appended to the system prompt). Counts and lengths may not
// be zero except a system message's content; nothing may follow max_tokens.
//
// Version 2, str = uvarint length | UTF-8 bytes:
//
//	"ANTH" | 0x02 | model str | max_tokens uvarint | count uvarint | message… | param…
//	message = role u8 (0 user, 1 assistant) | blocks uvarint | block…
//	block   = 0 text: text str
//	        | 1 image: source u8 (0 base64: media_type str | data str; 1 url: url str)
//	        | 2 tool_use: id str | name str | input str (a JSON object)
//	        | 3 tool_result: tool_use_id str | is_error u8 | blocks uvarint | text or image block…
//	param   = tag u8 | length uvarint | value, until the end of the body; tags in paramTag's
//	          list, each scalar at most once; unknown tags 0x40-0x7F are skipped, others refused.

// paramTag identifies a version-2 request parameter.
type paramTag uint8

// Version-2 parameters, with their value layouts.
const (
	paramSystem       paramTag = 0x01 // UTF-8 text; repeatable, one system block each
	paramTemperature  paramTag = 0x02 // float64 (8 bytes), 0 to 1 (llm.MaxTemperature), as in the JSON API
	paramTopP         paramTag = 0x03 // float64 (8 bytes), 0 to 1
	paramTopK         paramTag = 0x04 // uvarint
	paramStopSequence paramTag = 0x05 // UTF-8 text, not empty; repeatable
	paramTool         paramTag = 0x06 // name str | description str | input_schema str (JSON object); repeatable
	paramToolChoice   paramTag = 0x07 // type u8 (0 auto, 1 any, 2 tool, 3 none) | name str (type 2 only) | disable_parallel_tool_use u8
	paramUserID       paramTag = 0x08 // UTF-8 text (metadata.user_id)
	paramOutput       paramTag = 0x09 // u8: 0 token IDs (default), 1 text frames
	// Tags from paramOptionalMin to paramOptionalMax are hints a server may ignore: one that does
	// not know such a tag skips it. Any other unknown tag is an error.
	paramOptionalMin paramTag = 0x40
	paramOptionalMax paramTag = 0x7F
)

// Content block types of version-2 messages.
const (
	blockText       = 0
	blockImage      = 1
	blockToolUse    = 2
	blockToolResult = 3
)

// DecodeRequest decodes a binary request body into a canonical request (Format binary, Stream
// true), with the version negotiated from the headers (see NegotiateVersion) and the options
// the body carries. Every error is a 400 *apierr.Error with Code INVALID_BINARY whose message
// names the byte offset and the field ("binary: offset 5: model: length 40 exceeds the body
// (12 bytes left)"). The decoded request then meets the rules every front shares
// (llm.Request.Validate): the decoder checks them where it reads the field, with its offset, and
// llm.ValidateDecoded is the backstop, its message prefixed "binary: ".
//
// The model name is kept as sent: the pipeline matches names ignoring '-', '.' and case
// (route.Table.Resolve), so version 1's "claude35sonnet20240620" finds
// "claude-3-5-sonnet-20240620". The request's strings share one copy of the body; DecodeRequest
// does not keep body.
func DecodeRequest(body []byte, h http.Header) (*llm.Request, Mode, error) {
	v, err := NegotiateVersion(h)
	if err != nil {
		return nil, Mode{}, err
	}
	return DecodeRequestVersion(body, v)
}

// DecodeRequestVersion decodes a body of a known version (see DecodeRequest).
func DecodeRequestVersion(body []byte, v Version) (*llm.Request, Mode, error) {
	d := reqDecoder{b: body, s: string(body), idx: [3]int{-1, -1, -1}}
	if len(body) < len(Magic) || string(body[:len(Magic)]) != Magic {
		n := min(len(body), len(Magic))
		return nil, Mode{}, d.fail(0, "magic", "got % x, want 41 4e 54 48 (\"ANTH\")", body[:n])
	}
	d.off = len(Magic)
	req := &llm.Request{Format: llm.FormatBinary, Stream: true}
	mode := Mode{Version: v}
	var err error
	switch v {
	case V1:
		err = d.v1(req)
	case V2:
		err = d.v2(req, &mode)
	default:
		err = d.fail(0, "version", "unsupported version %d", v)
	}
	if err != nil {
		return nil, Mode{}, err
	}
	// Every string was checked as UTF-8 as it was read (text), and every image source against
	// the image rules (block): ValidateDecoded does not check them twice.
	if err := llm.ValidateDecoded(req, true); err != nil {
		if e, ok := err.(*apierr.Error); ok {
			e.Code, e.Message = ErrorCode, "binary: "+e.Message
		}
		return nil, Mode{}, err
	}
	return req, mode, nil
}

// reqDecoder reads a request body. idx holds the indexes of the message, block and nested block
// being read, substituted for the "[]" of a field name only when an error is reported, so the
// success path builds no strings but the one copy of the body.
type reqDecoder struct {
	b   []byte
	s   string // string(b): the request's strings are substrings of it
	off int
	end int // the end of the current param value (0: the body's end)
	idx [3]int
}

func (d *reqDecoder) limit() int {
	if d.end > 0 {
		return d.end
	}
	return len(d.b)
}

func (d *reqDecoder) left() int { return d.limit() - d.off }

func (d *reqDecoder) fail(off int, field, format string, args ...any) error {
	name := field
	for _, i := range d.idx {
		if i < 0 || !strings.Contains(name, "[]") {
			break
		}
		name = strings.Replace(name, "[]", fmt.Sprintf("[%d]", i), 1)
	}
	return &apierr.Error{Kind: apierr.InvalidRequest, Code: ErrorCode, Param: name,
		Message: fmt.Sprintf("binary: offset %d: %s: ", off, name) + fmt.Sprintf(format, args...)}
}

func (d *reqDecoder) truncated(field string, need int) error {
	if d.end > 0 && d.end < len(d.b) {
		return d.fail(d.off, field, "truncated: needs %d bytes, the param value has %d left", need, d.left())
	}
	return d.fail(d.off, field, "truncated: needs %d bytes, the body has %d left", need, d.left())
}

func (d *reqDecoder) u8(field string) (int, error) {
	if d.left() < 1 {
		return 0, d.truncated(field, 1)
	}
	d.off++
	return int(d.b[d.off-1]), nil
}

func (d *reqDecoder) u16(field string) (int, error) {
	if d.left() < 2 {
		return 0, d.truncated(field, 2)
	}
	d.off += 2
	return int(ebin.BigEndian.Uint16(d.b[d.off-2:])), nil
}

// uvarint reads a minimal LEB128 unsigned integer no larger than max.
func (d *reqDecoder) uvarint(field string, max uint64) (uint64, error) {
	x, n := ebin.Uvarint(d.b[d.off:d.limit()])
	switch {
	case n == 0:
		return 0, d.fail(d.off, field, "truncated varint: the body ends inside it")
	case n < 0:
		return 0, d.fail(d.off, field, "varint overflows 64 bits")
	case n > 1 && d.b[d.off+n-1] == 0:
		return 0, d.fail(d.off, field, "non-minimal varint encoding")
	case x > max:
		return 0, d.fail(d.off, field, "%d exceeds the limit of %d", x, max)
	}
	d.off += n
	return x, nil
}

// count reads a uvarint count of items that take at least minSize bytes each, refusing a count
// the bytes left cannot hold before anything is allocated for it.
func (d *reqDecoder) count(field string, minSize int) (int, error) {
	at := d.off
	n, err := d.uvarint(field, math.MaxInt32)
	if err != nil {
		return 0, err
	}
	if n > uint64(d.left()/minSize) {
		return 0, d.fail(at, field, "%d items cannot fit in the %d bytes left", n, d.left())
	}
	return int(n), nil
}

// text reads n bytes of UTF-8.
func (d *reqDecoder) text(n int, field string) (string, error) {
	if n > d.left() {
		return "", d.fail(d.off, field, "length %d exceeds the body (%d bytes left)", n, d.left())
	}
	s := d.s[d.off : d.off+n]
	if !utf8.ValidString(s) {
		at := d.off
		for i, r := range s {
			if r == utf8.RuneError {
				if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
					at += i
					break
				}
			}
		}
		return "", d.fail(d.off, field, "invalid UTF-8 at offset %d", at)
	}
	d.off += n
	return s, nil
}

// str reads a version-2 str: uvarint length, then UTF-8.
func (d *reqDecoder) str(field string, maxLen int) (string, error) {
	n, err := d.uvarint(field+" length", uint64(maxLen))
	if err != nil {
		return "", err
	}
	return d.text(int(n), field)
}

// json reads a version-2 str holding a JSON object.
func (d *reqDecoder) jsonObject(field string) (json.RawMessage, error) {
	at := d.off
	s, err := d.str(field, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	if t := strings.TrimLeft(s, " \t\r\n"); t == "" || t[0] != '{' || !json.Valid([]byte(s)) {
		return nil, d.fail(at, field, "not a JSON object")
	}
	return json.RawMessage(s), nil
}

// nonZeroU8 reads a byte for field, refusing 0 with the message zero.
func (d *reqDecoder) nonZeroU8(field, zero string) (int, error) {
	at := d.off
	n, err := d.u8(field)
	if err == nil && n == 0 {
		err = d.fail(at, field, "%s", zero)
	}
	return n, err
}

func (d *reqDecoder) v1(req *llm.Request) error {
	n, err := d.nonZeroU8("model name length", "must be at least 1")
	if err != nil {
		return err
	}
	if req.Model, err = d.text(n, "model name"); err != nil {
		return err
	}
	countAt := d.off
	count, err := d.nonZeroU8("message count", "zero messages: at least one is required")
	if err != nil {
		return err
	}
	req.Messages = make([]llm.Message, 0, count)
	blocks := make([]llm.Block, count) // one text block per message, in one allocation
	for i := range count {
		d.idx[0] = i
		at := d.off
		role, err := d.u8("messages[].role")
		if err != nil {
			return err
		}
		if role > 2 {
			return d.fail(at, "messages[].role", "role %d: want 0 (user), 1 (assistant) or 2 (system)", role)
		}
		n, err := d.u16("messages[].content length")
		if err != nil {
			return err
		}
		at = d.off
		text, err := d.text(n, "messages[].content")
		if err != nil {
			return err
		}
		if role == 2 {
			if text != "" {
				req.System = append(req.System, llm.Block{Type: llm.BlockText, Text: text})
			}
			continue
		}
		if text == "" {
			return d.fail(at, "messages[].content", "empty: user and assistant messages need text")
		}
		blocks[i] = llm.Block{Type: llm.BlockText, Text: text}
		req.Messages = append(req.Messages, llm.Message{Role: llm.Role(role), Content: blocks[i : i+1 : i+1]})
	}
	d.idx[0] = -1
	at := d.off
	mt, err := d.u16("max_tokens")
	if err != nil {
		return err
	}
	if mt == 0 {
		return d.fail(at, "max_tokens", "must be at least 1")
	}
	req.MaxTokens = mt
	if d.off != len(d.b) {
		return d.fail(d.off, "end", "%d more bytes after max_tokens, which ends the request", len(d.b)-d.off)
	}
	if len(req.Messages) == 0 {
		return d.fail(countAt, "message count", "only system messages: at least one user or assistant message is required")
	}
	return nil
}

func (d *reqDecoder) v2(req *llm.Request, mode *Mode) error {
	at := d.off
	ver, err := d.u8("version")
	if err != nil {
		return err
	}
	if ver != int(V2) {
		return d.fail(at, "version", "the body says version %d, the request negotiated 2", ver)
	}
	at = d.off
	if req.Model, err = d.str("model", MaxModelLen); err != nil {
		return err
	}
	if req.Model == "" {
		return d.fail(at, "model", "empty")
	}
	at = d.off
	mt, err := d.uvarint("max_tokens", MaxTokensV2)
	if err != nil {
		return err
	}
	if mt == 0 {
		return d.fail(at, "max_tokens", "must be at least 1")
	}
	req.MaxTokens = int(mt)
	// A message takes at least 4 bytes (role, block count, text type and length), so a tiny body
	// cannot make the decoder allocate much.
	if req.Messages, err = list(d, "message count", 4, 0, "zero messages: at least one is required", d.message); err != nil {
		return err
	}
	if i, j, reason := req.ToolPairError(); reason != "" {
		return d.pairError(i, j, reason)
	}
	return d.params(req, mode)
}

// pairError is the error for tool_use and tool_result blocks that do not pair up, found in
// message i (block j, or the message itself when j < 0) of a version 2 body whose messages
// decoded: it names the offset where that message or block starts, which it finds by reading
// the body again up to there, on this error path only.
func (d *reqDecoder) pairError(i, j int, reason string) error {
	w := reqDecoder{b: d.b, s: d.s, off: len(Magic), idx: [3]int{-1, -1, -1}}
	_, _ = w.u8("version")
	_, _ = w.str("model", MaxModelLen)
	_, _ = w.uvarint("max_tokens", MaxTokensV2)
	_, _ = w.count("message count", 4)
	var m llm.Message
	for range i {
		_ = w.message(&m)
	}
	d.idx[0] = i
	if j < 0 {
		return d.fail(w.off, "messages[]", "%s", reason)
	}
	role, _ := w.u8("messages[].role")
	_, _ = w.count("messages[].block count", 2)
	var b llm.Block
	for range j {
		_ = w.block(&b, "messages[].content[].", llm.Role(role), true)
	}
	d.idx[1] = j
	return d.fail(w.off, "messages[].content[]", "%s", reason)
}

func (d *reqDecoder) message(m *llm.Message) error {
	at := d.off
	role, err := d.u8("messages[].role")
	if err != nil {
		return err
	}
	switch role {
	case 0, 1:
		m.Role = llm.Role(role)
	case 2:
		return d.fail(at, "messages[].role", "role 2 (system) is version 1 only: version 2 sends the system prompt as param 0x01")
	default:
		return d.fail(at, "messages[].role", "role %d: want 0 (user) or 1 (assistant)", role)
	}
	m.Content, err = list(d, "messages[].block count", 2, 1, "zero blocks: a message needs content", func(b *llm.Block) error {
		return d.block(b, "messages[].content[].", m.Role, true)
	})
	return err
}

// list reads the count of a list whose elements take at least minSize bytes each (field names
// it), then the elements, each with read, its index at level of d.idx. A count of zero is
// refused with the message empty, or reads as nil when empty is "".
func list[T any](d *reqDecoder, field string, minSize, level int, empty string, read func(*T) error) ([]T, error) {
	at := d.off
	n, err := d.count(field, minSize)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		if empty != "" {
			return nil, d.fail(at, field, "%s", empty)
		}
		return nil, nil
	}
	out := make([]T, n)
	for i := range out {
		d.idx[level] = i
		if err := read(&out[i]); err != nil {
			return out, err
		}
	}
	d.idx[level] = -1
	return out, nil
}

// block reads one content block of a message of the role; top is false inside a tool_result,
// where only text and images may appear.
func (d *reqDecoder) block(b *llm.Block, path string, role llm.Role, top bool) error {
	at := d.off
	typ, err := d.u8(path + "type")
	if err != nil {
		return err
	}
	if !top && (typ == blockToolUse || typ == blockToolResult) {
		return d.fail(at, path+"type", "a tool_result holds text and image blocks only")
	}
	switch typ {
	case blockText:
		b.Type = llm.BlockText
		at := d.off
		if b.Text, err = d.str(path+"text", math.MaxInt32); err != nil {
			return err
		}
		if b.Text == "" {
			return d.fail(at, path+"text", "empty")
		}
	case blockImage:
		b.Type = llm.BlockImage
		at := d.off
		src, err := d.u8(path + "source")
		if err != nil {
			return err
		}
		// The image rules every front applies (llm's image.go), checked here to name the field
		// and its offset; ValidateDecoded trusts them.
		switch src {
		case 0:
			at = d.off
			if b.MediaType, err = d.nonEmpty(path+"media_type", 255); err != nil {
				return err
			}
			if !llm.ImageMediaType(b.MediaType) {
				return d.fail(at, path+"media_type", "must be one of %s, got %q", llm.ImageMediaTypes, b.MediaType)
			}
			at = d.off
			if b.Data, err = d.nonEmpty(path+"data", math.MaxInt32); err != nil {
				return err
			}
			if !llm.ImageBase64(b.Data) {
				return d.fail(at, path+"data", "must be base64 (standard alphabet, padded)")
			}
		case 1:
			at = d.off
			if b.URL, err = d.nonEmpty(path+"url", math.MaxInt32); err != nil {
				return err
			}
			if !llm.ImageURL(b.URL) {
				return d.fail(at, path+"url", "must be an http or https URL")
			}
		default:
			return d.fail(at, path+"source", "source %d: want 0 (base64) or 1 (url)", src)
		}
	case blockToolUse:
		if role != llm.RoleAssistant {
			return d.fail(at, path+"type", "tool_use blocks are only allowed in assistant messages")
		}
		b.Type = llm.BlockToolUse
		if b.ID, err = d.nonEmpty(path+"id", 255); err != nil {
			return err
		}
		if b.Name, err = d.nonEmpty(path+"name", 255); err != nil {
			return err
		}
		if b.Input, err = d.jsonObject(path + "input"); err != nil {
			return err
		}
	case blockToolResult:
		if role != llm.RoleUser {
			return d.fail(at, path+"type", "tool_result blocks are only allowed in user messages")
		}
		b.Type = llm.BlockToolResult
		if b.ToolUseID, err = d.nonEmpty(path+"tool_use_id", 255); err != nil {
			return err
		}
		at := d.off
		isErr, err := d.u8(path + "is_error")
		if err != nil {
			return err
		}
		if isErr > 1 {
			return d.fail(at, path+"is_error", "%d: want 0 or 1", isErr)
		}
		b.IsError = isErr == 1
		b.Content, err = list(d, path+"block count", 2, 2, "", func(c *llm.Block) error {
			return d.block(c, path+"content[].", role, false)
		})
		if err != nil {
			return err
		}
	default:
		return d.fail(at, path+"type", "block type %d: want 0 (text), 1 (image), 2 (tool_use) or 3 (tool_result)", typ)
	}
	return nil
}
