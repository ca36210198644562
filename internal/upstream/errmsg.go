package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// MaxReason bounds, in bytes, the engine's own words in an error message a client gets.
const MaxReason = 300

// ErrMalformed is the cause of every error about an engine answer that cannot be passed on: a
// content type that does not fit the request, JSON that is truncated or invalid, a stream that
// is not SSE or not in the format's shape.
var ErrMalformed = errors.New("upstream: malformed engine answer")

// Malformed returns the 502 for an engine answer the pass-through path refuses to relay. why is
// layer0's own description (the engine's bytes never become the message); detail, which may
// quote them, goes to the cause, for the log. It is retryable: the request moves on to another
// replica or fallback when nothing was written yet.
func Malformed(why, detail string) *apierr.Error {
	cause := ErrMalformed
	if detail != "" {
		cause = fmt.Errorf("%w: %s", ErrMalformed, detail)
	}
	return &apierr.Error{Kind: apierr.BadGateway, Message: "the engine's answer was malformed: " + why, Cause: cause}
}

// IsSSE reports whether a Content-Type is text/event-stream.
func IsSSE(ct string) bool { return mediaType(ct) == "text/event-stream" }

// IsJSON reports whether a Content-Type is application/json (or another JSON type, +json).
func IsJSON(ct string) bool {
	mt := mediaType(ct)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// mediaType returns the media type of a Content-Type, lower case, without parameters; it
// allocates only for a type that is not already lower case.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	for i := 0; i < len(ct); i++ {
		if 'A' <= ct[i] && ct[i] <= 'Z' {
			return strings.ToLower(ct)
		}
	}
	return ct
}

// CheckContentType refuses a 2xx answer whose content type cannot carry what the request asked
// for: a streamed request wants text/event-stream, another application/json. A JSON answer to a
// streamed request passes here, since it may be an error object the caller reports as such; the
// caller refuses it once read (StreamAnsweredJSON).
func CheckContentType(ct string, stream bool) error {
	switch {
	case IsJSON(ct):
		return nil
	case stream && IsSSE(ct):
		return nil
	case IsSSE(ct):
		return Malformed("a stream answered a request that did not ask for one", "")
	}
	return Malformed("unexpected content type (want application/json or text/event-stream)", "content type "+quoteShort(ct))
}

// StreamAnsweredJSON is the error for a JSON answer (not an error object) to a streamed
// request: relaying it would give a streaming client a body it cannot read.
func StreamAnsweredJSON() *apierr.Error {
	return Malformed("a JSON answer to a streamed request", "")
}

// quoteShort quotes s, cut to 64 bytes, for a log line.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strconv.Quote(s)
}

// Sanitize makes text from an engine fit for a client's error message: invalid UTF-8 and control
// characters are dropped, white space (line breaks and tabs included) becomes one space, and what is
// longer than max bytes is cut at a character boundary and marked with "…".
func Sanitize(s string, max int) string {
	clean := len(s) <= max
	for i := 0; clean && i < len(s); i++ {
		c := s[i]
		clean = c >= 0x20 && c < 0x7f && !(c == ' ' && (i == 0 || i == len(s)-1 || s[i+1] == ' '))
	}
	if clean {
		return s // the usual message: printable ASCII, allocates nothing
	}
	var b strings.Builder
	b.Grow(min(len(s), max+len("…")))
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case unicode.IsSpace(r): // line breaks and tabs included
			space = b.Len() > 0
			continue
		case r == utf8.RuneError && n <= 1, unicode.IsControl(r):
			continue
		}
		sp := 0
		if space {
			sp = 1
		}
		if b.Len()+sp+utf8.RuneLen(r) > max {
			b.WriteString("…")
			return b.String()
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// engineError turns an engine's answer of status with body (outside 2xx) into the client's
// error. The body reaches r.DecodeError only when it is a well-formed JSON object (an API error
// in some format, whose type it reads); anything else (an HTML page, a stack trace, plain text)
// is decoded as if empty. The client's message is layer0's own (hide): the engine's words go to
// the error's cause, for the access log and the debug trace, and the whole body to the process
// log, redacted: at warn level for a 5xx (or another unexpected status), at debug for a 4xx.
func (c *Client) engineError(r *Request, status int, body []byte) *apierr.Error {
	if c.log != nil {
		level := slog.LevelWarn
		if status >= 400 && status < 500 {
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "engine answered an error",
			"engine", c.name, "status", status, "body", c.key.Redact(string(body)))
	}
	decodable := body
	if !jsontext.ValidObject(body) {
		decodable = nil
	}
	e := r.DecodeError(status, decodable)
	c.hide(e, status)
	return e
}

// hide gives e, an error an engine answered (status, or 0 for an error inside a 2xx answer),
// layer0's stable message in place of the engine's own words, which may name internal
// addresses or credentials: the message says which engine failed and how, and where its words
// are — in the gateway's log, under the request's id. The words, redacted, cleaned and bounded,
// become the cause (which the access log and the debug trace show, and which Classify reads:
// "out of memory" and context overflows still decide the fallback). A context overflow keeps
// saying so, as clients act on it ("prompt is too long" makes a coding agent compact its
// context). An error hidden already is left as it is.
func (c *Client) hide(e *apierr.Error, status int) {
	var h *hidden
	if errors.As(e.Cause, &h) {
		return
	}
	said := Sanitize(c.key.Redact(e.Message), MaxReason)
	if !codeLike(e.Code) {
		e.Code = ""
	}
	var b strings.Builder
	if apierr.ContextOverflow(strings.ToLower(said + " " + e.Code)) {
		b.WriteString("prompt is too long: the input does not fit the model's context window; ")
		if e.Kind == apierr.InvalidRequest {
			e.Code = "context_length_exceeded" // whatever the engine's own code, clients act on this one
		}
	}
	b.WriteString("engine ")
	b.WriteString(c.name)
	if status > 0 {
		b.WriteString(" answered an error (status ")
		b.WriteString(strconv.Itoa(status))
		b.WriteString(")")
	} else {
		b.WriteString(" sent an error in its answer")
	}
	b.WriteString("; its own message is in the gateway's log under this request's id")
	e.Message = b.String()
	e.Cause = &hidden{text: "upstream: engine " + c.name + " said " + strconv.Quote(said), err: e.Cause}
}

// hidden is the cause of an engine's error after hide: the engine's words, and the cause before.
type hidden struct {
	text string
	err  error
}

func (h *hidden) Error() string { return h.text }
func (h *hidden) Unwrap() error { return h.err }

// codeLike reports whether an engine's error code may reach the client (as X-Error-Code and
// OpenAI's code): an identifier of letters, digits, '_', '.' and '-', up to 64 bytes.
func codeLike(code string) bool {
	if len(code) > 64 {
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
