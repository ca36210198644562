// Package binary is the binary streaming protocol (docs/protocol.md): requests decoded into
// llm.Request, response events encoded as length-prefixed frames, and the frame-stream decoder
// clients use. Version 1 is the original format, byte for byte; version 2 is ours and lifts its
// limits. Frames coalesce every token ready at a flush and never wait for another; encoding and
// decoding a frame allocate nothing.
//
// The flow of one exchange:
//
//	client                                        server
//	POST /v1/messages
//	Content-Type: application/x-anthropic-binary[; version=2]
//	body: "ANTH" [version] request            →   DecodeRequest → pipeline → StreamWriter
//	                                          ←   200, body: "ANTH" [version] frame… done
//	                                          ←   or 400 X-Error-Code: INVALID_BINARY
//
// A frame is type | length | payload: in version 1 type uint8 and length uint16 big-endian, in
// version 2 type uint8 and length uvarint. Every integer of version 1 is big-endian; version 2
// writes counts and lengths as uvarints (LEB128, minimal) and floats as IEEE 754 big-endian.
package binary

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
)

// Version is a protocol version.
//
// History:
//   - 1: the original protocol. uint8 model length and message count, uint16
//     content lengths, max_tokens and token IDs, four frame types, no version on the wire.
//   - 2: layer0's. Negotiated with the Content-Type parameter version=2 (or the header
//     X-Binary-Version: 2); the request and the response repeat the version after the magic.
//     Lengths, counts, IDs and max_tokens are uvarints; every Messages API parameter; text,
//     tool-call, start, block and stop frames; usage with cache counts; errors with status,
//     type, code and message. Clients skip frame types they do not know.
type Version uint8

// Protocol versions.
const (
	V1 Version = 1
	V2 Version = 2
	// Latest is the newest version this package speaks.
	Latest = V2
)

// Names on the wire.
const (
	// MediaType is the Content-Type of binary requests and responses.
	MediaType = "application/x-anthropic-binary"
	// VersionHeader may carry the version instead of the Content-Type parameter.
	VersionHeader = "X-Binary-Version"
	// ErrorCode is the X-Error-Code of a request that cannot be decoded.
	ErrorCode = "INVALID_BINARY"
	// Magic opens every request and response body.
	Magic = "ANTH"
)

// Limits. Version 1's are those of its field widths; version 2 bounds what a field width no
// longer does. Each length is checked against its limit and against the bytes left before
// anything is read or allocated.
const (
	// MaxPayloadV1 is the largest version-1 frame payload (uint16 length).
	MaxPayloadV1 = 1<<16 - 1
	// MaxPayloadV2 is the largest version-2 frame payload a decoder accepts (16 MiB).
	MaxPayloadV2 = 1 << 24
	// MaxTokensV1 is the largest version-1 max_tokens (uint16).
	MaxTokensV1 = 1<<16 - 1
	// MaxTokensV2 is the largest version-2 max_tokens.
	MaxTokensV2 = 1<<31 - 1
	// MaxModelLen is the longest model name in bytes (uint8 length in version 1; kept in 2).
	MaxModelLen = 255
	// MaxMessagesV1 is the most messages a version-1 request holds (uint8 count).
	MaxMessagesV1 = 255
	// MaxContentV1 is the longest version-1 message content in bytes (uint16 length).
	MaxContentV1 = 1<<16 - 1
	// MaxVocabV1 is the largest vocabulary version-1 token IDs (uint16) can index.
	MaxVocabV1 = 1 << 16
)

// FrameType is the first byte of a response frame.
type FrameType uint8

// Frame types. Types 0-3 exist in both versions with the payload layouts noted; the others are
// version 2 only. In version 2 a client skips a type it does not know (its length says how far).
const (
	// FrameToken carries wire-vocabulary token IDs of the text of the open text block, as many as
	// were ready. V1: uint16 each. V2: uvarint each.
	FrameToken FrameType = 0
	// FrameUsage carries the final token counts, in the model's tokenizer.
	// V1: input_tokens uint32 | output_tokens uint32 | cache_hit_ratio uint32 (0.001% units:
	// cache_read / (input + cache_creation + cache_read), 92.3% = 92300).
	// V2: input uvarint | output uvarint | cache_creation uvarint | cache_read uvarint.
	FrameUsage FrameType = 1
	// FrameError ends a stream that failed after it began; a done frame follows.
	// V1: status uint16 (the HTTP status the error would have had) | message UTF-8 (the rest).
	// V2: status uvarint | type str | code str | message UTF-8 (the rest).
	FrameError FrameType = 2
	// FrameDone is the last frame; empty.
	FrameDone FrameType = 3
	// FrameText carries UTF-8 text of the open text block (V2, when the request asked for text
	// output). A multi-byte character may be split across two frames.
	FrameText FrameType = 4
	// FrameStart opens the message (V2): id str | model str | input uvarint |
	// cache_creation uvarint | cache_read uvarint.
	FrameStart FrameType = 5
	// FrameBlockStart opens the next content block, numbered from 0 (V2): kind uint8
	// (BlockKindText, or BlockKindToolUse followed by id str | name str).
	FrameBlockStart FrameType = 6
	// FrameToolInput carries a fragment of the open tool_use block's input JSON (V2).
	FrameToolInput FrameType = 7
	// FrameBlockStop closes the open content block (V2); empty.
	FrameBlockStop FrameType = 8
	// FrameStop says why generation ended (V2): reason uint8 (StopReason order: end_turn,
	// max_tokens, stop_sequence, tool_use, refusal) | stop_sequence UTF-8 (the rest). Reason 4,
	// refusal (an engine's content filter), came after the first clients of version 2, whose
	// decoders refuse it: an answer ending so is one they could not have been told about.
	FrameStop FrameType = 9
)

// Block kinds of FrameBlockStart.
const (
	BlockKindText    = 0
	BlockKindToolUse = 1
)

// String names the frame type as docs/protocol.md does.
func (t FrameType) String() string {
	switch t {
	case FrameToken:
		return "token"
	case FrameUsage:
		return "usage"
	case FrameError:
		return "error"
	case FrameDone:
		return "done"
	case FrameText:
		return "text"
	case FrameStart:
		return "start"
	case FrameBlockStart:
		return "block_start"
	case FrameToolInput:
		return "tool_input"
	case FrameBlockStop:
		return "block_stop"
	case FrameStop:
		return "stop"
	}
	return "type_" + strconv.Itoa(int(t))
}

// Mode is what a request negotiated: the version of both bodies and, in version 2, whether the
// response carries text frames instead of token IDs (for clients without the vocabulary).
type Mode struct {
	Version Version
	Text    bool
	// MaxTokens is, to read a version-1 response, the request's max_tokens. Version 1 has no
	// stop frame: a response whose output tokens reach MaxTokens stopped at max_tokens, any
	// other ended its turn (a version-1 request carries no stop sequences and no tools, so
	// nothing else can have stopped it). Zero reads every version-1 stop as end_turn. Writers
	// and version 2 ignore it.
	MaxTokens int
}

// ContentType is the response Content-Type for the mode.
func (m Mode) ContentType() string {
	if m.Version == V1 {
		return MediaType
	}
	return MediaType + "; version=" + strconv.Itoa(int(m.Version))
}

// IsMediaType reports whether a Content-Type value names the binary protocol, with any
// parameters; the server routes on it.
func IsMediaType(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), MediaType)
}

// LooksBinary reports whether a body starts with the magic, so that a binary request sent with
// another Content-Type can be refused with a clear message instead of a JSON syntax error.
func LooksBinary(body []byte) bool {
	return len(body) >= len(Magic) && string(body[:len(Magic)]) == Magic
}

// NegotiateVersion reads the version a request asks for from its Content-Type parameter
// "version" and the X-Binary-Version header (absent: 1; both given: they must agree). The
// Content-Type must be MediaType. Errors are 400 INVALID_BINARY.
func NegotiateVersion(h http.Header) (Version, error) {
	ct := h.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || !strings.EqualFold(mt, MediaType) {
		return 0, &apierr.Error{Kind: apierr.InvalidRequest, Code: ErrorCode, Param: "Content-Type",
			Message: fmt.Sprintf("binary: Content-Type %q: want %s", truncate(ct), MediaType)}
	}
	v, err := parseVersion(params["version"], "Content-Type version parameter")
	if err != nil {
		return 0, err
	}
	hv, err := parseVersion(h.Get(VersionHeader), VersionHeader+" header")
	if err != nil {
		return 0, err
	}
	switch {
	case v == 0 && hv == 0:
		return V1, nil
	case v == 0:
		return hv, nil
	case hv != 0 && hv != v:
		return 0, &apierr.Error{Kind: apierr.InvalidRequest, Code: ErrorCode, Param: VersionHeader,
			Message: fmt.Sprintf("binary: Content-Type says version %d but %s says %d", v, VersionHeader, hv)}
	}
	return v, nil
}

// parseVersion parses a version value; "" is 0 (not given).
func parseVersion(s, where string) (Version, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < int(V1) || n > int(Latest) {
		return 0, &apierr.Error{Kind: apierr.InvalidRequest, Code: ErrorCode, Param: where,
			Message: fmt.Sprintf("binary: %s %q: unsupported version (this server speaks 1 and 2)", where, truncate(s))}
	}
	return Version(n), nil
}

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// ErrVocabTooLarge is returned by NewStreamWriter when version-1 uint16 IDs cannot index the
// vocabulary.
var ErrVocabTooLarge = errors.New("binary: vocabulary too large for version 1 (more than 65,536 entries)")
