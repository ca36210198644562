package probe_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/probe"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/testcert"
)

const key = "l0-probe-key"

// listener is how serveLayer0 serves the gateway.
type listener int

const (
	cleartext listener = iota // HTTP/1.1 and h2c on one port
	overTLS                   // TLS: ALPN anthropic-v3, h2, http/1.1
	withHTTP3                 // TLS, and HTTP/3 on the same port over UDP
)

// serveLayer0 serves a gateway with one key and a sim model on a loopback listener of kind l,
// and returns its base URL and, for TLS, the roots that trust its certificate.
func serveLayer0(t *testing.T, l listener) (string, *x509.CertPool) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
keys:
  - {name: probe, hash: %s}
engines:
  sim: {kind: sim, sim: {ttft: 5ms, inter_token_latency: 1ms}}
models:
  sim: {engines: [sim]}
`, auth.HashHex(key))))
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	var roots *x509.CertPool
	scheme := "http"
	if l != cleartext {
		var certFile, keyFile string
		certFile, keyFile, roots = testcert.Write(t, t.TempDir())
		if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
			t.Fatal(err)
		}
		scheme = "https"
	}
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	waits := 1
	if l == withHTTP3 {
		h3, err := server.ListenHTTP3(srv, ln)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- h3.Serve(ctx, time.Second) }()
		waits++
	}
	t.Cleanup(func() {
		stop()
		for range waits {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("the server did not stop")
			}
		}
		g.Close()
	})
	return scheme + "://" + ln.Addr().String(), roots
}

func run(t *testing.T, o probe.Options) *probe.Report {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 20 * time.Second // generous: the machine may be loaded
	}
	r, err := probe.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		t.Log("\n" + strings.Join(r.Lines(), "\n"))
	}
	return r
}

// checkSettings asserts the SETTINGS layer0 promises (docs/http2.md).
func checkSettings(t *testing.T, h *probe.HTTP2, over string) {
	t.Helper()
	if h == nil || h.Error != "" || h.Over != over {
		t.Fatalf("HTTP/2: %+v, want SETTINGS over %s", h, over)
	}
	for name, want := range map[string]uint32{
		"ENABLE_CONNECT_PROTOCOL": 1,
		"MAX_HEADER_LIST_SIZE":    65536,
		"INITIAL_WINDOW_SIZE":     2 << 20,
		"MAX_FRAME_SIZE":          16384,
		"MAX_CONCURRENT_STREAMS":  1000,
	} {
		if got, ok := h.Get(name); !ok || got != want {
			t.Errorf("SETTINGS %s: got %d (sent %v), want %d", name, got, ok, want)
		}
	}
}

// checkAPI asserts that api was detected and its request served with plausible numbers.
func checkAPI(t *testing.T, r *probe.Report, api, proto string) *probe.Exchange {
	t.Helper()
	for i := range r.APIs {
		x := &r.APIs[i]
		if x.API != api {
			continue
		}
		if !x.Present || x.Error != "" || x.Status != http.StatusOK || x.Proto != proto {
			t.Errorf("%s: %+v, want served over %s", api, x, proto)
			return x
		}
		if !(x.TTFBMs > 0 && x.TTFBMs <= x.FirstTokenMs && x.FirstTokenMs <= x.EndMs) {
			t.Errorf("%s: times first byte %v, first token %v, end %v: want 0 < first byte ≤ first token ≤ end",
				api, x.TTFBMs, x.FirstTokenMs, x.EndMs)
		}
		if x.Tokens <= 0 || x.Bytes <= 0 || x.Text == "" || x.BytesPerToken != float64(x.Bytes)/float64(x.Tokens) {
			t.Errorf("%s: %d tokens, %d bytes, %.1f bytes/token, text %q", api, x.Tokens, x.Bytes, x.BytesPerToken, x.Text)
		}
		if !strings.HasPrefix(x.Headers["X-Request-Id"], "L0-") || x.Headers["X-Processing-Time"] == "" {
			t.Errorf("%s: headers %v, want layer0's X-Request-Id and X-Processing-Time", api, x.Headers)
		}
		return x
	}
	t.Errorf("%s: not probed", api)
	return nil
}

// Cleartext: no TLS, h2c's SETTINGS with prior knowledge, and the three APIs over h2c.
func TestProbeCleartext(t *testing.T) {
	base, _ := serveLayer0(t, cleartext)
	r := run(t, probe.Options{URL: base, Key: key})
	if r.DNS == nil || !r.DNS.Literal || r.TCP == nil || r.TCP.Error != "" || r.TLS != nil || r.HTTP3 != nil {
		t.Fatalf("connection: %+v %+v %+v %+v", r.DNS, r.TCP, r.TLS, r.HTTP3)
	}
	checkSettings(t, r.HTTP2, "h2c")
	if r.Model != "sim" || r.ModelGuessed != "" {
		t.Errorf("model: %q (guessed: %q), want sim from /v1/models", r.Model, r.ModelGuessed)
	}
	for _, api := range probe.APIs {
		checkAPI(t, r, api, "HTTP/2.0")
	}

	// Without the key the gateway lists nothing: the report says the model is a guess and why,
	// rather than naming one as if the server had.
	nokey := run(t, probe.Options{URL: base})
	if !strings.Contains(nokey.ModelGuessed, "401") || !strings.Contains(strings.Join(nokey.Lines(), "\n"), "a guess: GET /v1/models answered 401") {
		t.Errorf("without a key: guessed %q, lines:\n%s", nokey.ModelGuessed, strings.Join(nokey.Lines(), "\n"))
	}
	if f := r.Failure(); f != "" {
		t.Errorf("Failure: %q", f)
	}

	// By name: localhost is resolved (from the hosts file, no network), and the address that
	// answers is the one connected to.
	port := base[strings.LastIndex(base, ":")+1:]
	r = run(t, probe.Options{URL: "http://localhost:" + port, Key: key, Model: "sim"})
	if r.DNS == nil || r.DNS.Literal || r.DNS.Error != "" || len(r.DNS.Addrs) == 0 || r.TCP.Addr != "127.0.0.1:"+port {
		t.Errorf("by name: DNS %+v, TCP %+v", r.DNS, r.TCP)
	}
	checkAPI(t, r, probe.OpenAI, "HTTP/2.0")
}

// TLS with HTTP/3: the handshake and certificate, ALPN anthropic-v3 negotiated (layer0 prefers
// it), the same SETTINGS over TLS, Alt-Svc and a QUIC handshake, the APIs over HTTP/2.
func TestProbeTLSAndHTTP3(t *testing.T) {
	base, roots := serveLayer0(t, withHTTP3)
	r := run(t, probe.Options{URL: base, Key: key, RootCAs: roots})
	tl := r.TLS
	if tl == nil || tl.Error != "" {
		t.Fatalf("TLS: %+v", tl)
	}
	if tl.ALPN != "anthropic-v3" || strings.Join(tl.ALPNOffered, ",") != "anthropic-v3,h2,http/1.1" {
		t.Errorf("ALPN: offered %v, negotiated %q; want anthropic-v3", tl.ALPNOffered, tl.ALPN)
	}
	if tl.Version != "TLS 1.3" || tl.CipherSuite == "" || !tl.Verified || tl.Subject != "CN=layer0 test" ||
		!strings.Contains(strings.Join(tl.Names, " "), "127.0.0.1") {
		t.Errorf("TLS: %+v", tl)
	}
	if na, err := time.Parse(time.RFC3339, tl.NotAfter); err != nil || time.Until(na) > 2*time.Hour || time.Until(na) <= 0 {
		t.Errorf("certificate expiry %q: want within the test certificate's hour", tl.NotAfter)
	}
	checkSettings(t, r.HTTP2, "tls")
	h3 := r.HTTP3
	port := base[strings.LastIndex(base, ":")+1:]
	if h3 == nil || !h3.Advertised || !strings.HasPrefix(h3.AltSvc, `h3=":`+port+`"`) || !h3.Connected || h3.ALPN != "h3" || h3.Ms <= 0 {
		t.Errorf("HTTP/3: %+v, want advertised on port %s and a QUIC handshake", h3, port)
	}
	for _, api := range probe.APIs {
		checkAPI(t, r, api, "HTTP/2.0")
	}
	lines := strings.Join(r.Lines(), "\n")
	for _, want := range []string{"offered anthropic-v3, h2, http/1.1 → negotiated anthropic-v3", "ENABLE_CONNECT_PROTOCOL  1",
		"MAX_HEADER_LIST_SIZE     65536", "QUIC handshake with 127.0.0.1:" + port} {
		if !strings.Contains(lines, want) {
			t.Errorf("lines lack %q:\n%s", want, lines)
		}
	}
}

// TLS without HTTP/3: nothing advertised; with --insecure the probe works unverified; without
// the roots the handshake fails, and the report says so.
func TestProbeTLSVerification(t *testing.T) {
	base, _ := serveLayer0(t, overTLS)
	r := run(t, probe.Options{URL: base, Key: key, Insecure: true})
	if r.TLS == nil || r.TLS.Error != "" || r.TLS.Verified || r.TLS.ALPN != "anthropic-v3" {
		t.Fatalf("TLS, insecure: %+v", r.TLS)
	}
	if r.HTTP3 == nil || r.HTTP3.Advertised || r.HTTP3.AltSvc != "" {
		t.Errorf("HTTP/3 on a listener without it: %+v", r.HTTP3)
	}
	checkAPI(t, r, probe.Anthropic, "HTTP/2.0")

	r = run(t, probe.Options{URL: base, Key: key})
	if r.TLS == nil || !strings.Contains(r.TLS.Error, "certificate") || len(r.APIs) != 0 ||
		!strings.HasPrefix(r.Failure(), "TLS handshake: ") {
		t.Errorf("TLS with an unknown authority: %+v, failure %q", r.TLS, r.Failure())
	}
}

// openAIOnly is a server that is not layer0 and speaks only OpenAI's Chat Completions (streamed,
// with usage), lists one model, and answers 404 to everything else.
func openAIOnly() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"tiny-chat","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream || req.Model != "tiny-chat" ||
			r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Server", "tiny-openai")
		words := []string{"Hello", " from", " elsewhere", "."}
		for _, word := range words {
			b, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": word}}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
		}
		if req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\n", len(words))
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	return mux
}

// checkOpenAIOnly asserts what a probe of openAIOnly finds: Anthropic and binary absent (404),
// OpenAI detected and timed, its model taken from /v1/models.
func checkOpenAIOnly(t *testing.T, r *probe.Report) {
	t.Helper()
	if r.Model != "tiny-chat" {
		t.Errorf("model: %q, want tiny-chat from /v1/models", r.Model)
	}
	for _, x := range r.APIs {
		switch x.API {
		case probe.OpenAI:
			if !x.Present || x.Error != "" || x.Text != "Hello from elsewhere." || x.Tokens != 4 || x.Deltas != 4 ||
				x.Proto != "HTTP/1.1" || x.Headers["Server"] != "tiny-openai" || x.EndMs < x.FirstTokenMs || x.FirstTokenMs <= 0 {
				t.Errorf("openai: %+v", x)
			}
		default:
			if x.Present || x.Status != http.StatusNotFound {
				t.Errorf("%s on a server without it: %+v, want absent after a 404", x.API, x)
			}
		}
	}
	if f := r.Failure(); f != "" {
		t.Errorf("Failure: %q", f)
	}
	lines := strings.Join(r.Lines(), "\n")
	for _, want := range []string{"anthropic absent (/v1/messages answered 404)", "binary    absent (/v1/messages answered 404)",
		"openai    POST /v1/chat/completions 200 HTTP/1.1", "Server: tiny-openai"} {
		if !strings.Contains(lines, want) {
			t.Errorf("lines lack %q:\n%s", want, lines)
		}
	}
}

// A plain HTTP/1.1 server that is not layer0: no h2c, only the API it speaks.
func TestProbeOpenAIOnlyServer(t *testing.T) {
	srv := httptest.NewServer(openAIOnly())
	defer srv.Close()
	r := run(t, probe.Options{URL: srv.URL, Key: key})
	if r.HTTP2 == nil || !strings.Contains(r.HTTP2.Error, "answered the HTTP/2 preface in HTTP/1.1") || len(r.HTTP2.Settings) != 0 {
		t.Errorf("HTTP/2 on an HTTP/1.1-only server: %+v, want no SETTINGS", r.HTTP2)
	}
	checkOpenAIOnly(t, r)
}

// The same server over TLS offering only HTTP/1.1: ALPN http/1.1, no HTTP/2, no HTTP/3.
func TestProbeOpenAIOnlyServerTLS(t *testing.T) {
	srv := httptest.NewTLSServer(openAIOnly())
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	r := run(t, probe.Options{URL: srv.URL, Key: key, RootCAs: roots})
	if r.TLS == nil || r.TLS.Error != "" || r.TLS.ALPN != "http/1.1" || !r.TLS.Verified || r.HTTP2 != nil {
		t.Fatalf("TLS: %+v, HTTP/2 %+v; want http/1.1 negotiated and no HTTP/2", r.TLS, r.HTTP2)
	}
	if r.HTTP3 == nil || r.HTTP3.Advertised {
		t.Errorf("HTTP/3: %+v, want not advertised", r.HTTP3)
	}
	if lines := strings.Join(r.Lines(), "\n"); !strings.Contains(lines, `http2     not negotiated: the server chose "http/1.1"`) {
		t.Errorf("lines lack the HTTP/2 verdict:\n%s", lines)
	}
	checkOpenAIOnly(t, r)
}

// A server that is not layer0 and speaks only the Anthropic Messages API: a binary request is
// refused with a JSON 400 (it cannot read the body), which means the binary protocol is absent.
func TestProbeAnthropicOnlyServer(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Api-Key") != key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"expected JSON"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Request-Id", "req_elsewhere")
		for _, ev := range []string{
			`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
			`{"type":"message_stop"}`,
		} {
			var head struct{ Type string }
			_ = json.Unmarshal([]byte(ev), &head)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", head.Type, ev)
			w.(http.Flusher).Flush()
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r := run(t, probe.Options{URL: srv.URL, Key: key, Model: "m"})
	for _, x := range r.APIs {
		switch x.API {
		case probe.Anthropic:
			if !x.Present || x.Error != "" || x.Text != "Hi there" || x.Tokens != 2 || x.Deltas != 2 || x.Bytes <= 0 {
				t.Errorf("anthropic: %+v", x)
			}
		case probe.Binary:
			if x.Present || x.Status != http.StatusBadRequest || !strings.Contains(x.Error, "expected JSON") {
				t.Errorf("binary on a server without it: %+v, want absent after its 400", x)
			}
		case probe.OpenAI:
			if x.Present || x.Status != http.StatusNotFound {
				t.Errorf("openai on a server without it: %+v", x)
			}
		}
	}
	if f := r.Failure(); f != "" {
		t.Errorf("Failure: %q", f)
	}
	if lines := strings.Join(r.Lines(), "\n"); !strings.Contains(lines, "Request-Id: req_elsewhere, X-Processing-Time: -") {
		t.Errorf("lines lack the Anthropic API's request id:\n%s", lines)
	}
}

// Nothing listening: the connect fails and the report says where.
func TestProbeRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	r := run(t, probe.Options{URL: url, Timeout: 5 * time.Second})
	if r.TCP == nil || r.TCP.Error == "" || !strings.HasPrefix(r.Failure(), "connecting to ") || r.HTTP2 != nil {
		t.Errorf("refused: %+v, failure %q", r.TCP, r.Failure())
	}
	if _, err := probe.Run(context.Background(), probe.Options{URL: "ftp://example"}); err == nil {
		t.Error("an ftp:// URL was probed")
	}
}
