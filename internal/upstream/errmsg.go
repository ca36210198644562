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

// statusNamed reports whether msg already names the HTTP status.
func statusNamed(msg string, status int) bool {
	s := strconv.Itoa(status)
	return strings.Contains(msg, "status "+s) || strings.Contains(msg, "HTTP "+s)
}

// engineError turns an engine's answer of status with body (outside 2xx) into the client's
// error. The body reaches r.DecodeError only when it is a well-formed JSON object (an API error
// in some format, whose message and type it reads); anything else (an HTML page, a stack trace,
// plain text) is decoded as if empty, so that its words never reach the client. The message is
// redacted, sanitised, bounded and names the engine's status. The whole body goes to the log,
// redacted: at warn level for a 5xx (or another unexpected status), at debug for a 4xx.
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
	msg := Sanitize(c.key.Redact(e.Message), MaxReason)
	if !statusNamed(msg, status) {
		if msg == "" {
			msg = "engine error (status " + strconv.Itoa(status) + ")"
		} else {
			msg = "engine error (status " + strconv.Itoa(status) + "): " + msg
		}
	}
	e.Message = msg
	return e
}
