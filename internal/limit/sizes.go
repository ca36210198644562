package limit

import (
	"net/http"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// Sizes bounds the shape of a request. Each check names what is too large, by how much, and
// the limit. A zero field means no limit; the zero value checks nothing.
type Sizes struct {
	// MaxBodyBytes is the largest request body, in bytes; larger gets 413. Default 0 (no limit).
	MaxBodyBytes int64
	// MaxHeaderBytes is the largest total size of the request headers (names, values and
	// separators), in bytes; larger gets 413. Default 0 (no limit).
	MaxHeaderBytes int
	// MaxMessages is the most messages one request may carry; more gets 400. Default 0 (no
	// limit).
	MaxMessages int
	// MaxContentBytes is the largest content of one message or of the system prompt, in bytes
	// of text, tool input, tool results and image data together; larger gets 400 naming the
	// message. Default 0 (no limit).
	MaxContentBytes int
}

// CheckBody refuses a declared Content-Length above MaxBodyBytes before the body is read. A
// negative length (unknown) passes: the reader checks what arrives with CheckBodyRead.
func (s Sizes) CheckBody(contentLength int64) error {
	if s.MaxBodyBytes > 0 && contentLength > s.MaxBodyBytes {
		return bodyTooLarge(strconv.FormatInt(contentLength, 10)+" bytes", s.MaxBodyBytes)
	}
	return nil
}

// CheckBodyRead refuses a body of which more than MaxBodyBytes have arrived (read so far).
func (s Sizes) CheckBodyRead(read int64) error {
	if s.MaxBodyBytes > 0 && read > s.MaxBodyBytes {
		return bodyTooLarge("more than that ("+strconv.FormatInt(read, 10)+" bytes read)", s.MaxBodyBytes)
	}
	return nil
}

func bodyTooLarge(size string, limit int64) *apierr.Error {
	return &apierr.Error{Kind: apierr.RequestTooLarge, Code: "REQUEST_TOO_LARGE",
		Message: "request body too large: the limit is " + strconv.FormatInt(limit, 10) + " bytes, the body is " + size}
}

// CheckHeader refuses request headers whose total size exceeds MaxHeaderBytes, counting each
// field as "Name: value\r\n".
func (s Sizes) CheckHeader(h http.Header) error {
	if s.MaxHeaderBytes <= 0 {
		return nil
	}
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if n > s.MaxHeaderBytes {
		return &apierr.Error{Kind: apierr.RequestTooLarge, Code: "HEADERS_TOO_LARGE",
			Message: "request headers too large: " + strconv.Itoa(n) + " bytes, the limit is " + strconv.Itoa(s.MaxHeaderBytes)}
	}
	return nil
}

// Check refuses a decoded request with more than MaxMessages messages, or a message (or system
// prompt) with more than MaxContentBytes of content. The error's Param names the field.
func (s Sizes) Check(r *llm.Request) error {
	if s.MaxMessages > 0 && len(r.Messages) > s.MaxMessages {
		return apierr.Invalid("messages", "%d messages, more than the limit of %d", len(r.Messages), s.MaxMessages)
	}
	if s.MaxContentBytes <= 0 {
		return nil
	}
	if n := contentBytes(r.System); n > s.MaxContentBytes {
		return apierr.Invalid("system", "%d bytes, more than the limit of %d per message", n, s.MaxContentBytes)
	}
	for i := range r.Messages {
		if n := contentBytes(r.Messages[i].Content); n > s.MaxContentBytes {
			return apierr.Invalid("messages["+strconv.Itoa(i)+"].content", "%d bytes, more than the limit of %d per message",
				n, s.MaxContentBytes)
		}
	}
	return nil
}

// contentBytes sums the payload bytes of blocks, tool results' nested blocks included.
func contentBytes(bs []llm.Block) int {
	n := 0
	for i := range bs {
		b := &bs[i]
		n += len(b.Text) + len(b.Data) + len(b.URL) + len(b.Input) + contentBytes(b.Content)
	}
	return n
}

// RequestBytes is the content of r in bytes — its system prompt's and messages' payloads — the
// memory a decoded request holds, give or take its structure.
func RequestBytes(r *llm.Request) int {
	n := contentBytes(r.System)
	for i := range r.Messages {
		n += contentBytes(r.Messages[i].Content)
	}
	return n
}
