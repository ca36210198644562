package client

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"crypto/tls"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/vocab"
	wire "github.com/layer0ai/layer0/internal/wire/binary"
)

// ticker is an OpenAI-compatible upstream that streams " tick" every 2ms until it has sent n
// chunks or its request ends, and closes canceled when the request ends early: what the engine
// behind layer0 sees when a client goes away.
type ticker struct {
	n        int
	canceled chan struct{}
	once     sync.Once
}

func (tk *ticker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for range tk.n {
		io.WriteString(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"ticks","choices":[{"index":0,"delta":{"role":"assistant","content":" tick"},"finish_reason":null}]}`+"\n\n")
		rc.Flush()
		t.Reset(2 * time.Millisecond)
		select {
		case <-r.Context().Done():
			tk.once.Do(func() { close(tk.canceled) })
			return
		case <-t.C:
		}
	}
	io.WriteString(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"ticks","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
}

// gateway is layer0 on 127.0.0.1 speaking HTTP/1.1 and h2c, with models
// claude-3-5-sonnet-20240620 (the sim), failing (the sim, failing after 3 tokens) and ticks (an
// OpenAI-compatible upstream that streams until canceled).
type gateway struct {
	url    string
	conns  atomic.Int64
	ticker *ticker
	h      http.Handler
}

func startGateway(t testing.TB) *gateway {
	t.Helper()
	g := &gateway{ticker: &ticker{n: 5000, canceled: make(chan struct{})}}
	up := httptest.NewServer(g.ticker)
	t.Cleanup(up.Close)
	cfg, err := config.Parse([]byte(`
engines:
  sim: {kind: sim}
  bad: {kind: sim, sim: {fail: {after_tokens: 3}}}
  slow: {kind: openai, url: "` + up.URL + `"}
models:
  claude-3-5-sonnet-20240620: {engines: [sim]}
  failing: {engines: [bad]}
  ticks: {engines: [slow]}
`))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.h = gw
	srv := server.HTTPServer(gw, server.ListenOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(countingListener{ln, &g.conns})
	t.Cleanup(func() { srv.Close() })
	g.url = "http://" + ln.Addr().String()
	return g
}

func newClient(t testing.TB, base string, p Protocol, tr Transport) *Client {
	t.Helper()
	c, err := New(Options{BaseURL: base, Protocol: p, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func userRequest(model, text string, maxTokens int) *Request {
	return &Request{Model: model, MaxTokens: maxTokens,
		Messages: []Message{{Role: llm.RoleUser, Content: []Block{{Type: llm.BlockText, Text: text}}}}}
}

var allProtocols = []Protocol{Binary2, Binary2Text, Binary1, SSE, JSON}

func text(r *Response) string {
	var b strings.Builder
	for _, bl := range r.Content {
		b.WriteString(bl.Text)
	}
	return b.String()
}

// TestProtocolsAgree asks the same question in every protocol over HTTP/1.1 and h2c: the sim
// answers the same prompt the same way, so every protocol must decode the same text and output
// count. Version 1 sends the model name without dashes, as version 1's clients do.
func TestProtocolsAgree(t *testing.T) {
	g := startGateway(t)
	var want string
	for _, tr := range []Transport{HTTP1, H2C} {
		for _, p := range allProtocols {
			c := newClient(t, g.url, p, tr)
			model := "claude-3-5-sonnet-20240620"
			if p == Binary1 {
				model = "claude35sonnet20240620"
			}
			s, err := c.Stream(context.Background(), userRequest(model, "Tell me about gateways.", 60))
			if err != nil {
				t.Fatalf("%v %v: %v", p, tr, err)
			}
			if got, wantProto := s.HTTPResponse().ProtoMajor, map[Transport]int{HTTP1: 1, H2C: 2}[tr]; got != wantProto {
				t.Errorf("%v %v: HTTP/%d, want HTTP/%d", p, tr, got, wantProto)
			}
			var col llm.Collector
			for ev, err := range s.Events() {
				if err != nil {
					t.Fatalf("%v %v: %v", p, tr, err)
				}
				col.Send(ev)
			}
			r := col.Response
			if want == "" {
				want = text(&r)
			}
			if got := text(&r); got != want || got == "" {
				t.Errorf("%v %v: got text %q, want %q", p, tr, got, want)
			}
			if r.Usage.OutputTokens == 0 || r.Usage.OutputTokens > 60 {
				t.Errorf("%v %v: got %d output tokens, want 1-60", p, tr, r.Usage.OutputTokens)
			}
			// Every protocol that carries a message id carries a msg_ one (version 1 has none).
			if p != Binary1 && !strings.HasPrefix(r.ID, "msg_") {
				t.Errorf("%v %v: got message id %q, want msg_…", p, tr, r.ID)
			}
		}
	}
}

func TestTLSHTTP2(t *testing.T) {
	g := startGateway(t)
	ts := httptest.NewUnstartedServer(g.h)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	for _, p := range allProtocols {
		c, err := New(Options{BaseURL: ts.URL, Protocol: p, TLSConfig: &tls.Config{RootCAs: roots}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Stream(context.Background(), userRequest("claude-3-5-sonnet-20240620", "Hi", 20))
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		if got := s.HTTPResponse().Proto; got != "HTTP/2.0" {
			t.Errorf("%v: got %s, want HTTP/2.0 negotiated by ALPN", p, got)
		}
		n := 0
		for _, err := range s.Events() {
			if err != nil {
				t.Fatalf("%v: %v", p, err)
			}
			n++
		}
		if n < 4 {
			t.Errorf("%v: got %d events, want a whole message", p, n)
		}
		c.CloseIdleConnections()
	}
}

// TestConnectionReuse sends requests one after another and, over h2c, many at once: each
// client opens one connection.
func TestConnectionReuse(t *testing.T) {
	for _, tr := range []Transport{HTTP1, H2C} {
		g := startGateway(t)
		c := newClient(t, g.url, Binary2, tr)
		for range 20 {
			if _, err := c.Message(context.Background(), userRequest("claude-3-5-sonnet-20240620", "Hi", 8)); err != nil {
				t.Fatal(err)
			}
		}
		if tr == H2C {
			var wg sync.WaitGroup
			errs := make(chan error, 50)
			for range 50 {
				wg.Go(func() {
					_, err := c.Message(context.Background(), userRequest("claude-3-5-sonnet-20240620", "Hi", 8))
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		// One connection serves them all. net/http's client gives a connection back for reuse
		// only once its writer confirms the request was written, and waits 50ms for that: on a
		// starved machine it can miss that window once and dial a second connection. Without
		// reuse there would be one per request (20, and up to 70 over h2c).
		if got := g.conns.Load(); got < 1 || got > 2 {
			t.Errorf("%v: the server saw %d connections for 20 requests or more, want 1 (2 under heavy load)", tr, got)
		}
	}
}

func TestBreakClosesStream(t *testing.T) {
	g := startGateway(t)
	c := newClient(t, g.url, Binary2, H2C)
	s, err := c.Stream(context.Background(), userRequest("ticks", "go", 10))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	select {
	case <-g.ticker.canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream did not see the stream close within 10s")
	}
	for _, err := range s.Events() {
		if err == nil || !strings.Contains(err.Error(), "already read") {
			t.Errorf("second iteration: got %v, want an already-read error", err)
		}
	}
}

// TestCancelStopsEngine cancels the context mid-stream in every protocol and transport: the
// iterator ends with the context's error, and the engine behind layer0 sees its request end.
func TestCancelStopsEngine(t *testing.T) {
	for _, tr := range []Transport{HTTP1, H2C} {
		for _, p := range []Protocol{Binary2, Binary2Text, Binary1, SSE} {
			g := startGateway(t)
			c := newClient(t, g.url, p, tr)
			ctx, cancel := context.WithCancel(context.Background())
			s, err := c.Stream(ctx, userRequest("ticks", "go", 10))
			if err != nil {
				t.Fatal(err)
			}
			deltas := 0
			var last error
			for ev, err := range s.Events() {
				if err != nil {
					last = err
					break
				}
				if ev.Kind == llm.EventTextDelta {
					if deltas++; deltas == 3 {
						cancel()
					}
				}
			}
			if !errors.Is(last, context.Canceled) {
				t.Errorf("%v %v: the iterator ended with %v, want context.Canceled", p, tr, last)
			}
			select {
			case <-g.ticker.canceled:
			case <-time.After(10 * time.Second):
				t.Fatalf("%v %v: the upstream did not see the cancel within 10s", p, tr)
			}
			cancel()
		}
	}
}

func TestErrors(t *testing.T) {
	g := startGateway(t)
	for _, p := range allProtocols {
		c := newClient(t, g.url, p, H2C)
		_, err := c.Message(context.Background(), userRequest("no-such-model", "Hi", 8))
		var e *Error
		if !errors.As(err, &e) || e.Kind != apierr.NotFound || e.Status() != http.StatusNotFound {
			t.Errorf("%v: unknown model: got %v, want a 404 *Error", p, err)
		}

		s, err := c.Stream(context.Background(), userRequest("failing", "Tell me a long story.", 100))
		if p == JSON {
			// Not streamed: the failure comes before the response.
			if !errors.As(err, &e) || e.Status() < 500 {
				t.Errorf("%v: mid-generation failure: got %v, want a 5xx *Error", p, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		deltas := 0
		var last error
		for ev, err := range s.Events() {
			if err != nil {
				last = err
				continue
			}
			if ev.Kind == llm.EventTextDelta {
				deltas++
			}
		}
		if !errors.As(last, &e) || e.Status() < 500 || !strings.Contains(e.Message, "simulated failure") {
			t.Errorf("%v: mid-stream failure: got %v, want a 5xx *Error saying simulated failure", p, last)
		}
		if deltas == 0 {
			t.Errorf("%v: no text before the failure", p)
		}
	}
	if _, err := New(Options{BaseURL: "localhost:1"}); err == nil {
		t.Error("New with a BaseURL without scheme: got nil error")
	}
	c := newClient(t, g.url, Binary1, H2C)
	req := userRequest("claude-3-5-sonnet-20240620", "Hi", 8)
	req.Temperature = new(float64)
	if _, err := c.Stream(context.Background(), req); err == nil || !strings.Contains(err.Error(), "use version 2") {
		t.Errorf("version 1 with temperature: got %v, want a refusal suggesting version 2", err)
	}
}

type vectorFile struct {
	InvalidRequests []struct {
		Name    string            `json:"name"`
		Headers map[string]string `json:"headers"`
		Hex     string            `json:"hex"`
		Error   string            `json:"error"`
	} `json:"invalid_requests"`
	Requests []struct {
		Name    string            `json:"name"`
		Headers map[string]string `json:"headers"`
		Hex     string            `json:"hex"`
	} `json:"requests"`
}

func loadVectors(t *testing.T) vectorFile {
	b, err := os.ReadFile("../testdata/binary/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func post(t *testing.T, url string, header map[string]string, body []byte) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}

// TestMalformedOverHTTP sends every invalid request of the test vectors, and the valid ones cut
// at every byte, to a real server: each gets 400, X-Error-Code INVALID_BINARY and a JSON error
// whose message names the offset and field.
func TestMalformedOverHTTP(t *testing.T) {
	g := startGateway(t)
	f := loadVectors(t)
	for _, v := range f.InvalidRequests {
		body, _ := hex.DecodeString(v.Hex)
		resp, got := post(t, g.url, v.Headers, body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Error-Code") != wire.ErrorCode {
			t.Errorf("%s: got %d %q, want 400 %q", v.Name, resp.StatusCode, resp.Header.Get("X-Error-Code"), wire.ErrorCode)
		}
		var e struct {
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal([]byte(got), &e); err != nil || e.Error.Message != v.Error || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: got body %s, want the message %q", v.Name, got, v.Error)
		}
	}
	for _, v := range f.Requests {
		body, _ := hex.DecodeString(v.Hex)
		for cut := range len(body) {
			if v.Headers["Content-Type"] != wire.MediaType {
				break // version 2 bodies may end between params
			}
			resp, got := post(t, g.url, v.Headers, body[:cut])
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Error-Code") != wire.ErrorCode || !strings.Contains(got, "offset") {
				t.Fatalf("%s cut at %d: got %d %q %s", v.Name, cut, resp.StatusCode, resp.Header.Get("X-Error-Code"), got)
			}
		}
	}
	// A binary body with a JSON Content-Type, as an HTTP library that overwrote the header sends.
	body, _ := hex.DecodeString(f.Requests[0].Hex)
	resp, got := post(t, g.url, map[string]string{"Content-Type": "application/json"}, body)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Error-Code") != wire.ErrorCode || !strings.Contains(got, "Content-Type") {
		t.Errorf("mislabeled binary body: got %d %q %s", resp.StatusCode, resp.Header.Get("X-Error-Code"), got)
	}
}

// TestVocabFetchedOnce serves a stream in a vocabulary the client does not have: it fetches the
// table once by its hash and decodes with it.
func TestVocabFetchedOnce(t *testing.T) {
	entries := make([]string, 0, 258)
	for b := range 256 {
		entries = append(entries, string([]byte{byte(b)}))
	}
	entries = append(entries, "hello", " world")
	raw := []byte("L0VC\x01")
	raw = binary.BigEndian.AppendUint32(raw, uint32(len(entries)))
	for _, e := range entries {
		raw = append(raw, byte(len(e)))
		raw = append(raw, e...)
	}
	voc, err := vocab.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int64
	mux := http.NewServeMux()
	mux.Handle(vocab.Path+"/", voc.Handler())
	mux.HandleFunc("GET "+vocab.PathPrefix+"{hash}", func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		voc.Handler().ServeHTTP(w, r)
	})
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		_, mode, err := wire.DecodeRequest(readAll(r), r.Header)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", mode.ContentType())
		w.Header().Set(vocab.HashHeader, voc.Hash())
		sw, _ := wire.NewStreamWriter(w, nil, mode, voc)
		for _, ev := range []llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventBlockStart}, {Kind: llm.EventTextDelta, Text: "hello world"},
			{Kind: llm.EventBlockStop}, {Kind: llm.EventStop, Usage: llm.Usage{OutputTokens: 2}}} {
			sw.Send(&ev)
		}
		sw.Flush()
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	c := newClient(t, ts.URL, Binary2, Auto)
	for range 3 {
		r, err := c.Message(context.Background(), userRequest("m", "hi", 5))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff("hello world", text(r)); diff != "" {
			t.Errorf("text (-want +got):\n%s", diff)
		}
	}
	if got := fetches.Load(); got != 1 {
		t.Errorf("got %d vocabulary fetches, want 1", got)
	}
}

func readAll(r *http.Request) []byte {
	var b bytes.Buffer
	b.ReadFrom(r.Body)
	return b.Bytes()
}

// BenchmarkWarmH2C sends short requests over one warm h2c connection from parallel goroutines:
// req/s is what one client sustains (the goal is over a thousand).
func BenchmarkWarmH2C(b *testing.B) {
	for _, p := range []Protocol{Binary2, Binary1, SSE} {
		b.Run(p.String(), func(b *testing.B) {
			g := startGateway(b)
			c := newClient(b, g.url, p, H2C)
			model := "claude-3-5-sonnet-20240620"
			if _, err := c.Message(context.Background(), userRequest(model, "Hi", 16)); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(4)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Message(context.Background(), userRequest(model, "Hi", 16)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			if got := g.conns.Load(); got != 1 {
				b.Errorf("%d connections, want 1", got)
			}
		})
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Version 1 has no stop frame: an answer cut at max_tokens is reported as max_tokens (from the
// usage frame's output tokens and the request's max_tokens), like every other protocol reports
// it, not as end_turn; an answer that ends before the limit is end_turn.
func TestBinary1StopReason(t *testing.T) {
	g := startGateway(t)
	for _, tc := range []struct {
		max  int
		want llm.StopReason
	}{{3, llm.StopMaxTokens}, {4000, llm.StopEndTurn}} {
		for _, p := range []Protocol{Binary1, Binary2, SSE} {
			c := newClient(t, g.url, p, HTTP1)
			model := "claude-3-5-sonnet-20240620"
			if p == Binary1 {
				model = "claude35sonnet20240620"
			}
			s, err := c.Stream(context.Background(), userRequest(model, "Tell me about gateways.", tc.max))
			if err != nil {
				t.Fatalf("%v: %v", p, err)
			}
			var col llm.Collector
			for ev, err := range s.Events() {
				if err != nil {
					t.Fatalf("%v: %v", p, err)
				}
				col.Send(ev)
			}
			if got := col.Response.Stop; got != tc.want {
				t.Errorf("%v, max_tokens %d (%d output tokens): stop %v, want %v", p, tc.max, col.Response.Usage.OutputTokens, got, tc.want)
			}
		}
	}
}
