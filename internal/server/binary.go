package server

import (
	"net/http"

	"strings"
	"sync"

	"github.com/layer0ai/layer0/internal/apierr"

	"github.com/layer0ai/layer0/internal/vocab"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// The binary streaming protocol (docs/protocol.md): POST /v1/messages with Content-Type
// application/x-anthropic-binary, and the wire vocabulary its token IDs index.

// vocabHandler serves the default vocabulary; built on first use, immutable after.
var vocabHandler = sync.OnceValue(func() *vocab.Handler { return vocab.Default().Handler() })

// isBinary reports whether a request to /v1/messages speaks the binary protocol.
func isBinary(r *http.Request) bool { return binary.IsMediaType(r.Header.Get("Content-Type")) }

// isVocabPath reports whether path is the vocabulary's.
func isVocabPath(path string) bool {
	return path == vocab.Path || strings.HasPrefix(path, vocab.PathPrefix)
}

// vocabulary serves GET /v1/binary/vocab and /v1/binary/vocab/{hash}.
func (x *exchange) vocabulary() {
	// The handler's own refusals are plain text: answer them here, in the client's format.
	if m := x.r.Method; m != http.MethodGet && m != http.MethodHead {
		x.w.Header().Set("Allow", "GET, HEAD")
		x.fail(&apierr.Error{Kind: apierr.MethodNotAllowed, Code: "method_not_allowed",
			Message: m + " " + sanitize(x.r.URL.Path) + ": method not allowed, use GET"})
		return
	}
	current := vocab.PathPrefix + vocab.Default().Hash()
	if p := strings.TrimSuffix(x.r.URL.Path, "/"); p != vocab.Path && p != current {
		x.fail(&apierr.Error{Kind: apierr.NotFound, Code: "vocab_not_found",
			Message: "unknown vocabulary " + sanitize(strings.TrimPrefix(p, vocab.PathPrefix)) + "; the current one is " + current})
		return
	}
	x.armWrite()
	sw := &statusWriter{ResponseWriter: x.w, status: http.StatusOK}
	vocabHandler().ServeHTTP(sw, x.r)
	x.call.Record.Status = sw.status
	x.wrote = true
}

// statusWriter notes the status a handler writes, for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
