package server_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// startPassGateway serves a gateway whose model "claude" is a Messages engine and "gpt" an
// OpenAI-compatible one, both fakes, so that each client format takes the pass-through path.
func startPassGateway(t *testing.T) string {
	t.Helper()
	anth := fake.NewAnthropic(fake.Script{Text: "one two three"})
	t.Cleanup(anth.Close)
	oai := fake.NewOpenAI(fake.Script{Text: "one two three"})
	t.Cleanup(oai.Close)
	cfg, err := config.Parse([]byte(`
engines:
  anth: {kind: anthropic, url: ` + anth.URL + `}
  oai: {kind: openai, url: ` + oai.URL + `}
models:
  claude: {engines: [anth]}
  gpt: {engines: [oai]}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestPassThroughFraming checks how pass-through answers are framed: a complete answer goes out
// with a Content-Length (one write, no chunked encoding), a stream goes out chunked; both carry
// the timing headers and the model the client asked for.
func TestPassThroughFraming(t *testing.T) {
	base := startPassGateway(t)
	tests := []struct {
		name, path, body string
		stream           bool
		want             string // a piece of the body
	}{
		{"anthropic json", "/v1/messages", `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, false, `"model":"claude"`},
		{"anthropic sse", "/v1/messages", `{"model":"claude","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true, "event: message_stop"},
		{"openai json", "/v1/chat/completions", `{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`, false, `"model":"gpt"`},
		{"openai sse", "/v1/chat/completions", `{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true, "data: [DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("got status %d, want 200: %s", resp.StatusCode, body)
			}
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("got body %s, want it to contain %s", body, tt.want)
			}
			chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
			if chunked != tt.stream {
				t.Errorf("got chunked %v (Transfer-Encoding %v), want %v", chunked, resp.TransferEncoding, tt.stream)
			}
			if !tt.stream && resp.ContentLength != int64(len(body)) {
				t.Errorf("got Content-Length %d, want %d", resp.ContentLength, len(body))
			}
			for _, h := range []string{"X-Response-Time", "X-Processing-Time", "Request-Id", "Content-Type"} {
				if resp.Header.Get(h) == "" {
					t.Errorf("got no %s header", h)
				}
			}
		})
	}
}
