// Package fake runs in-process stand-ins for the engines layer0 talks to, for tests: an
// OpenAI-compatible server that writes vLLM's wire format byte for byte (role chunk, content
// chunks, tool calls with chatcmpl-tool- ids, a finish chunk with stop_reason, the usage-only
// final chunk, [DONE]) and a Messages API server that writes the hosted API's event sequence.
// A Script makes them slow, stall, fail with a status, fail inside the stream, or cut the
// connection; every request is recorded, and the moment a server sees its client go away is
// reported on Canceled, so tests can measure how fast a cancel reaches the engine.
package fake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/wire/sse"
)

// Script says how a fake engine answers. The zero value answers at once with Text "Hello from
// the fake engine." (or a tool call when the request offers tools and its last message is not a
// tool result).
type Script struct {
	// Text is the reply, streamed one word per chunk.
	Text string
	// FirstByte delays the response headers and first chunk.
	FirstByte time.Duration
	// Gap delays every chunk after the first.
	Gap time.Duration
	// Status, when set, answers with this status and Body instead.
	Status int
	// Body is the error body for Status.
	Body string
	// Header holds extra response headers (retry-after, for example).
	Header http.Header
	// HangAfter, when positive, stops sending (but keeps the connection) after this many chunks.
	HangAfter int
	// CutAfter, when positive, closes the connection after this many chunks.
	CutAfter int
	// ErrorAfter, when positive, sends the format's error event after this many chunks. A
	// request that is not streamed gets the format's error object as its body, with status 200.
	ErrorAfter int
	// Key, when set, is the credential the server demands.
	Key string
	// CachedTokens is reported as cached prompt tokens: OpenAI's
	// prompt_tokens_details.cached_tokens (part of prompt_tokens), Anthropic's
	// cache_read_input_tokens (beside input_tokens).
	CachedTokens int
	// CacheWriteTokens is reported as Anthropic's cache_creation_input_tokens (beside
	// input_tokens); OpenAI's usage has no such count.
	CacheWriteTokens int
	// PromptTokens, when positive, is the prompt's count reported — OpenAI's prompt_tokens,
	// Anthropic's input_tokens — instead of a token per four bytes of the request's body.
	PromptTokens int
	// Model, when set, is the model name the answers report instead of the request's (a dated
	// id for an alias, or llama-server's own name whatever it was asked for).
	Model string
	// Pretty writes the JSON with spaces, as the hosted OpenAI API does: a body that is not
	// streamed indented, each stream event's data with Python's separators (", " and ": ").
	Pretty bool
	// TextOnly answers in text even when the request offers tools (a coding agent would run
	// the fake's made-up call).
	TextOnly bool
	// Stop, when set, is the reason a text answer ends with, as the engine's format spells it
	// (content_filter for OpenAI, refusal for Anthropic), instead of the natural end.
	Stop string
}

// Request is a recorded request.
type Request struct {
	// URL is the request target as sent: path and query.
	URL    string
	Header http.Header
	Body   []byte
	// ProtoMajor is 2 for HTTP/2.
	ProtoMajor int
}

// Server is a fake engine listening on 127.0.0.1.
type Server struct {
	*httptest.Server
	// Received gets a value when a request arrives (buffered; never blocks the server).
	Received chan struct{}
	// Canceled gets the time at which the server saw a client go away mid-response.
	Canceled chan time.Time

	mu       sync.Mutex
	script   Script
	requests []Request
	anth     bool
}

// NewOpenAI starts a vLLM-style OpenAI-compatible server.
func NewOpenAI(s Script) *Server { return start(s, false) }

// NewAnthropic starts a Messages API server.
func NewAnthropic(s Script) *Server { return start(s, true) }

// NewOpenAITLS and NewAnthropicTLS start the servers over TLS with HTTP/2 enabled.
func NewOpenAITLS(s Script) *Server { return startTLS(s, false) }

// NewAnthropicTLS starts a Messages API server over TLS with HTTP/2.
func NewAnthropicTLS(s Script) *Server { return startTLS(s, true) }

func newServer(s Script, anth bool) *Server {
	f := &Server{script: s, anth: anth, Received: make(chan struct{}, 1024), Canceled: make(chan time.Time, 1024)}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	return f
}

func start(s Script, anth bool) *Server {
	f := newServer(s, anth)
	f.Start()
	return f
}

func startTLS(s Script, anth bool) *Server {
	f := newServer(s, anth)
	f.EnableHTTP2 = true
	f.StartTLS()
	return f
}

// SetScript replaces the script for the next requests.
func (f *Server) SetScript(s Script) {
	f.mu.Lock()
	f.script = s
	f.mu.Unlock()
}

// Requests returns the requests received so far.
func (f *Server) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

// parsed is what the fakes read from a request, in either format.
type parsed struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// wantsTool reports whether the reply should be a tool call: tools offered and the last message
// is not a tool result.
func (p *parsed) wantsTool() bool {
	if len(p.Tools) == 0 || len(p.Messages) == 0 {
		return false
	}
	last := p.Messages[len(p.Messages)-1]
	return last.Role != "tool" && !strings.Contains(string(last.Content), `"tool_result"`)
}

// toolName is the first tool's name.
func (p *parsed) toolName() string {
	var t struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	_ = json.Unmarshal(p.Tools[0], &t)
	if t.Function.Name != "" {
		return t.Function.Name
	}
	return t.Name
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	s := f.script
	f.requests = append(f.requests, Request{URL: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body, ProtoMajor: r.ProtoMajor})
	f.mu.Unlock()
	select {
	case f.Received <- struct{}{}:
	default:
	}
	for k, v := range s.Header {
		w.Header()[k] = v
	}
	if s.Key != "" && !f.authorized(r, s.Key) {
		f.fail(w, 401, "invalid credential "+r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
		return
	}
	if !f.anth && strings.HasSuffix(r.URL.Path, "/embeddings") && s.Status == 0 {
		embeddings(w, body)
		return
	}
	var p parsed
	if err := json.Unmarshal(body, &p); err != nil || p.Model == "" {
		f.fail(w, 400, "bad request body")
		return
	}
	if !f.sleep(r, s.FirstByte) {
		return
	}
	if s.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.Status)
		io.WriteString(w, s.Body)
		return
	}
	if s.ErrorAfter > 0 && !p.Stream {
		w.Header().Set("Content-Type", "application/json")
		if f.anth {
			io.WriteString(w, anthropicErrorJSON)
		} else {
			io.WriteString(w, openAIErrorJSON)
		}
		return
	}
	text := s.Text
	if text == "" {
		text = "Hello from the fake engine."
	}
	rp := reply{words: splitWords(text), prompt: len(body)/4 + 1, cached: s.CachedTokens, written: s.CacheWriteTokens,
		model: p.Model, stop: s.Stop}
	if s.PromptTokens > 0 {
		rp.prompt = s.PromptTokens
	}
	if s.Model != "" {
		rp.model = s.Model
	}
	if p.wantsTool() && !s.TextOnly {
		rp.tool = p.toolName()
		rp.args = []string{`{"city": `, `"Paris", `, `"unit": "c"}`}
	}
	if !p.Stream {
		jw := &jsonWriter{ResponseWriter: w}
		if f.anth {
			anthropicJSON(jw, &rp)
		} else {
			openAIJSON(jw, &rp)
		}
		out := jw.buf.Bytes()
		if s.Pretty {
			var b bytes.Buffer
			_ = json.Indent(&b, out, "", "  ")
			out = b.Bytes()
		}
		w.Write(out)
		return
	}
	var events []string
	errEvent := openAIError
	if f.anth {
		events, errEvent = anthropicEvents(&rp), anthropicError
	} else {
		events = openAIEvents(&rp, p.StreamOptions != nil && p.StreamOptions.IncludeUsage)
	}
	if s.Pretty {
		for i, ev := range events {
			events[i] = spaced(ev)
		}
	}
	f.stream(w, r, s, events, errEvent)
}

// jsonWriter collects a body that is not streamed, to write it as it is or indented.
type jsonWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (j *jsonWriter) Write(b []byte) (int, error) { return j.buf.Write(b) }

// spaced rewrites the JSON of an event's data with Python's separators, ", " and ": ".
func spaced(ev string) string {
	_, name, data, err := sse.NewReader(strings.NewReader(ev)).Next()
	if err != nil || !bytes.HasPrefix(data, []byte("{")) {
		return ev
	}
	var b strings.Builder
	if len(name) > 0 {
		b.WriteString("event: ")
		b.Write(name)
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	in, esc := false, false
	for _, c := range data {
		b.WriteByte(c)
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ',' || c == ':'):
			b.WriteByte(' ')
		}
	}
	b.WriteString("\n\n")
	return b.String()
}

func (f *Server) authorized(r *http.Request, key string) bool {
	if f.anth && r.Header.Get("X-Api-Key") == key {
		return true
	}
	return r.Header.Get("Authorization") == "Bearer "+key
}

func (f *Server) fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if f.anth {
		typ := map[int]string{401: "authentication_error", 400: "invalid_request_error"}[status]
		fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
		return
	}
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, msg)
}

// sleep waits d or until the client goes away, reporting the latter on Canceled.
func (f *Server) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		f.Canceled <- time.Now()
		return false
	}
}

// stream writes events (each a complete SSE event) with the script's gaps and failures.
func (f *Server) stream(w http.ResponseWriter, r *http.Request, s Script, events []string, errEvent string) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	for i, ev := range events {
		if i > 0 && !f.sleep(r, s.Gap) {
			return
		}
		switch {
		case s.HangAfter > 0 && i == s.HangAfter:
			<-r.Context().Done()
			f.Canceled <- time.Now()
			return
		case s.CutAfter > 0 && i == s.CutAfter:
			panic(http.ErrAbortHandler) // closes the connection without ending the response
		case s.ErrorAfter > 0 && i == s.ErrorAfter:
			io.WriteString(w, errEvent)
			fl.Flush()
			return
		}
		if _, err := io.WriteString(w, ev); err != nil {
			f.Canceled <- time.Now()
			return
		}
		fl.Flush()
	}
}

// reply is what a fake answers, in either format.
type reply struct {
	words   []string
	tool    string
	args    []string
	prompt  int
	cached  int
	written int // prompt tokens written to the prompt cache (Anthropic)
	model   string
	stop    string // the text answer's stop reason; "" is the natural end
}

func (rp *reply) output() int { return len(rp.words) + len(rp.args) }

func splitWords(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Writer gives w the Flush the pass-through path writes through (passthrough.Writer): an
// http.Flusher (an httptest.ResponseRecorder) is flushed, anything else only written to.
func Writer(w io.Writer) FlushWriter { return flushWriter{w} }

// FlushWriter is a writer with a Flush, as the pass-through path writes to.
type FlushWriter interface {
	io.Writer
	Flush() error
}

type flushWriter struct{ io.Writer }

func (f flushWriter) Flush() error {
	if fl, ok := f.Writer.(http.Flusher); ok {
		fl.Flush()
	}
	return nil
}
