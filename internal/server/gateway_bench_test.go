package server_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/h1"
	"github.com/layer0ai/layer0/internal/server"
)

// benchGateway serves a gateway over loopback in front of internal/bench's fast upstream (100
// tokens per answer): model "anth" is the upstream as an anthropic engine, "oai" as an openai
// engine, "sim" the embedded simulator with zero delays. The access log goes to io.Discard.
func benchGateway(b testing.TB, http1 string) string {
	return benchGatewayOn(b, http1, func(ln net.Listener) net.Listener { return ln })
}

// benchGatewayOn is benchGateway with the gateway's listener wrapped by wrap.
func benchGatewayOn(b testing.TB, http1 string, wrap func(net.Listener) net.Listener) string {
	b.Helper()
	up, err := bench.NewUpstream(bench.UpstreamConfig{Tokens: 100})
	if err != nil {
		b.Fatal(err)
	}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go up.Serve(uln) //nolint:errcheck // ends at Close
	b.Cleanup(func() { up.Close() })
	url := "http://" + uln.Addr().String()
	cfg, err := config.Parse([]byte(`
engines:
  anth: {kind: anthropic, url: ` + url + `}
  oai: {kind: openai, url: ` + url + `}
  s: {kind: sim}
  paced: {kind: sim, sim: {ttft: 2ms, inter_token_latency: 1ms}}
models:
  anth: {engines: [anth]}
  oai: {engines: [oai]}
  sim: {engines: [s]}
  paced: {engines: [paced]}
`))
	if err != nil {
		b.Fatal(err)
	}
	g, err := layer0.New(cfg, layer0.WithAccessLog(io.Discard))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second, HTTP1: http1})
	go srv.Serve(wrap(ln)) //nolint:errcheck // ends at Close
	b.Cleanup(func() { srv.Close(); g.Close() })
	return ln.Addr().String()
}

// binaryV1 is a binary protocol version 1 request for model with one user
// message.
func binaryV1(model, text string, maxTokens uint16) []byte {
	b := append([]byte("ANTH"), byte(len(model)))
	b = append(b, model...)
	b = append(b, 1, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(text)))
	b = append(b, text...)
	return binary.BigEndian.AppendUint16(b, maxTokens)
}

// BenchmarkGateway measures one request through the whole gateway — HTTP server, pipeline,
// engine, upstream client, access log — over loopback, one request at a time, with each server
// of cleartext HTTP/1.1. ns/op includes the upstream's and the client's share (about 15 µs for
// a JSON round trip without the gateway); allocs/op is the gateway's alone (neither allocates).
func BenchmarkGateway(b *testing.B) {
	for _, front := range []string{server.HTTP1Lean, server.HTTP1NetHTTP} {
		b.Run(strings.ReplaceAll(front, "/", ""), func(b *testing.B) { benchmarkGateway(b, front) })
	}
}

func benchmarkGateway(b *testing.B, front string) {
	addr := benchGateway(b, front)
	const prompt = `"messages":[{"role":"user","content":"Write a story about a lighthouse keeper."}]`
	agent := agentRequest("anth")
	tests := []struct {
		name, path, contentType string
		body                    []byte
		want                    string // the end of a complete answer
	}{
		{"anthropic-json", "/v1/messages", "application/json", []byte(`{"model":"anth","max_tokens":100,` + prompt + `}`), `}`},
		{"anthropic-sse", "/v1/messages", "application/json", []byte(`{"model":"anth","max_tokens":100,"stream":true,` + prompt + `}`), `"message_stop"}` + "\n\n"},
		{"openai-json", "/v1/chat/completions", "application/json", []byte(`{"model":"oai","max_tokens":100,` + prompt + `}`), `}`},
		{"openai-sse", "/v1/chat/completions", "application/json", []byte(`{"model":"oai","max_tokens":100,"stream":true,` + prompt + `}`), "[DONE]\n\n"},
		{"responses-json", "/v1/responses", "application/json", []byte(`{"model":"oai","max_output_tokens":100,"store":false,"input":[{"role":"user","content":"Write a story about a lighthouse keeper."}]}`), `}`},
		{"responses-sse", "/v1/responses", "application/json", []byte(`{"model":"oai","max_output_tokens":100,"store":false,"stream":true,"input":[{"role":"user","content":"Write a story about a lighthouse keeper."}]}`), "}\n\n"},
		{"anthropic-agent-json", "/v1/messages", "application/json", agent, `}`},
		{"binary-v1", "/v1/messages", "application/x-anthropic-binary", binaryV1("anth", "Write a story about a lighthouse keeper.", 100), "\x03\x00\x00"},
		{"sim-json", "/v1/messages", "application/json", []byte(`{"model":"sim","max_tokens":100,` + prompt + `}`), `}`},
		{"sim-sse", "/v1/messages", "application/json", []byte(`{"model":"sim","max_tokens":100,"stream":true,` + prompt + `}`), `"message_stop"}` + "\n\n"},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			hdr, err := h1.AppendHeader(nil, http.Header{"Content-Type": {tt.contentType}, "Anthropic-Version": {"2023-06-01"}})
			if err != nil {
				b.Fatal(err)
			}
			req := append(h1.AppendRequest(nil, http.MethodPost, tt.path, addr, len(tt.body), hdr), tt.body...)
			pool := &h1.Pool{Addr: addr}
			defer pool.CloseIdle()
			var body []byte
			roundTrip := func() { roundTrip(b, pool, req, tt.want, &body) }
			roundTrip()
			b.ReportAllocs()
			for b.Loop() {
				roundTrip()
			}
		})
	}
}

// agentRequest is a request as a coding agent sends one, about 100 KB: a long system prompt and
// a conversation of 24 turns whose tool results carry file contents.
func agentRequest(model string) []byte {
	line := "The lighthouse keeper climbed the stairs and trimmed the wick before the storm. "
	b := []byte(`{"model":"` + model + `","max_tokens":100,"system":"` + strings.Repeat(line, 250) + `","messages":[`)
	for i := range 24 {
		if i > 0 {
			b = append(b, ',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		b = append(b, `{"role":"`+role+`","content":"`+strings.Repeat(line, 40)+`"}`...)
	}
	return append(b, `]}`...)
}

func truncate(b []byte) string {
	s := string(b)
	if len(s) > 300 {
		s = s[:150] + " … " + s[len(s)-150:]
	}
	return strings.ToValidUTF8(s, "?")
}
