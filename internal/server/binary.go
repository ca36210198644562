package server

import (
	"net/http"

	"github.com/layer0ai/layer0/internal/apierr"
	"strings"
	"sync"

	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
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

// binaryMessages serves POST /v1/messages in the binary protocol: decode (400 INVALID_BINARY with
// the offset and field when the body is wrong), run the pipeline, stream frames. Errors before
// the first byte are HTTP errors with the Anthropic JSON body; after it, an error frame and done.
func (x *exchange) binaryMessages() {
	x.format = llm.FormatBinary
	rec := &x.call.Record
	rec.Format, rec.Stream = llm.FormatBinary, true
	body, ok := x.readBody()
	if !ok {
		return
	}
	req, mode, err := binary.DecodeRequest(body, x.r.Header)
	if err != nil {
		x.fail(err)
		return
	}
	x.call.Request = req
	voc := vocab.Default()
	if !mode.Text {
		x.w.Header().Set(vocab.HashHeader, voc.Hash())
	}
	out := &x.stw
	*out = streamWriter{x: x, contentType: mode.ContentType()}
	sw, err := binary.NewStreamWriter(out, out.flush, mode, voc)
	if err != nil {
		x.fail(err)
		return
	}
	sw.ID = ids.Message()
	x.call.Sink = x.endAt(sw)
	x.streamErr = sw
	if err := x.p.Serve(x.r.Context(), &x.call); err != nil {
		x.fail(err)
		return
	}
	_ = sw.Close() // a stream the engine ended without a stop event still gets its done frame
}

// refuseMislabeledBinary answers 400 INVALID_BINARY when a body in the binary format arrived with
// another Content-Type (an HTTP library that overwrote the header), instead of a JSON syntax
// error. No JSON body starts with the magic.
func (x *exchange) refuseMislabeledBinary(body []byte) bool {
	if !binary.LooksBinary(body) {
		return false
	}
	_, err := binary.NegotiateVersion(x.r.Header) // the error names the Content-Type
	x.fail(err)
	return true
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
