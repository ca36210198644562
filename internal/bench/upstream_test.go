package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// TestUpstreamRoutes sends each kind of request through net/http's client (a different HTTP/1.1
// implementation than the generator's) and checks status, headers and the body's tokens.
func TestUpstreamRoutes(t *testing.T) {
	const tokens = 5
	for _, paced := range []bool{false, true} {
		cfg := UpstreamConfig{Tokens: tokens}
		if paced {
			cfg.TTFT, cfg.ITL = time.Millisecond, time.Millisecond
		}
		_, url := startUpstream(t, cfg)
		tests := []struct {
			name, method, path, ctype, body string
			chunkedBody                     bool
			wantStatus                      int
			wantType, wantErrCode           string
			kind                            parserKind // checked when wantStatus is 200 and not models
			ver                             binary.Version
		}{
			{name: "anthropic json", method: "POST", path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[]}`,
				wantStatus: 200, wantType: "application/json", kind: parseAnthropicJSON},
			{name: "anthropic sse", method: "POST", path: "/v1/messages?beta=true", body: `{"model":"m","stream" : true}`,
				wantStatus: 200, wantType: "text/event-stream", kind: parseAnthropicSSE},
			{name: "openai json", method: "POST", path: "/v1/chat/completions", body: `{"stream":false,"stream_options":{"include_usage":true}}`,
				wantStatus: 200, wantType: "application/json", kind: parseOpenAIJSON},
			{name: "openai sse chunked request", method: "POST", path: "/v1/chat/completions", body: `{"stream":true}`, chunkedBody: true,
				wantStatus: 200, wantType: "text/event-stream", kind: parseOpenAISSE},
			{name: "binary", method: "POST", path: "/v1/messages", ctype: binaryContentType, body: "ANTH\x01m\x01\x00\x00\x01x\x00\x05",
				wantStatus: 200, wantType: binaryContentType, kind: parseBinary},
			{name: "binary v2", method: "POST", path: "/v1/messages", ctype: binaryContentType + "; version=2", body: "ANTH\x02\x01m\x05\x00",
				wantStatus: 200, wantType: binaryContentType + "; version=2", kind: parseBinary, ver: binary.V2},
			{name: "bad binary", method: "POST", path: "/v1/messages", ctype: binaryContentType, body: `{"model":"m"}`,
				wantStatus: 400, wantType: "application/json", wantErrCode: "INVALID_BINARY"},
			{name: "models", method: "GET", path: "/v1/models", wantStatus: 200, wantType: "application/json"},
			{name: "unknown path", method: "POST", path: "/v2/other", body: "{}", wantStatus: 404, wantType: "application/json"},
			{name: "wrong method", method: "GET", path: "/v1/messages", wantStatus: 404, wantType: "application/json"},
		}
		for _, tt := range tests {
			t.Run(tt.name+map[bool]string{true: "/paced"}[paced], func(t *testing.T) {
				var body io.Reader = strings.NewReader(tt.body)
				if tt.chunkedBody {
					body = io.MultiReader(strings.NewReader(tt.body)) // unknown length: sent chunked
				}
				req, err := http.NewRequest(tt.method, url+tt.path, body)
				if err != nil {
					t.Fatal(err)
				}
				if tt.ctype != "" {
					req.Header.Set("Content-Type", tt.ctype)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != tt.wantType ||
					resp.Header.Get("X-Error-Code") != tt.wantErrCode {
					t.Fatalf("got %d %q X-Error-Code %q, want %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"),
						resp.Header.Get("X-Error-Code"), tt.wantStatus, tt.wantType, tt.wantErrCode)
				}
				if tt.wantType == "application/json" && !json.Valid(got) {
					t.Errorf("body is not valid JSON: %s", got)
				}
				if tt.wantStatus == 200 && tt.path != "/v1/models" {
					if diff := gocmp.Diff(parsed{Tokens: tokens, Usage: tokens, Done: true}, parseAll(tt.kind, cmp.Or(tt.ver, binary.V1), got)); diff != "" {
						t.Errorf("body (-want +got):\n%s\n%s", diff, got)
					}
				}
			})
		}
	}
}

// TestUpstreamPacedStreamTakesItsTime checks the delays: the first token after TTFT, the last
// after (tokens-1) inter-token gaps more.
func TestUpstreamPacedStreamTakesItsTime(t *testing.T) {
	const ttft, itl, tokens = 30 * time.Millisecond, 10 * time.Millisecond, 4
	_, url := startUpstream(t, UpstreamConfig{Tokens: tokens, TTFT: ttft, ITL: itl})
	rep, err := Run(context.Background(), Config{URL: url, Format: llm.FormatBinary, Requests: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK != 2 {
		t.Fatalf("got %d ok (%v), want 2", rep.OK, rep.ErrorSamples)
	}
	if rep.TTFT.Min < ttft {
		t.Errorf("ttft min: got %v, want at least %v", rep.TTFT.Min, ttft)
	}
	if want := ttft + (tokens-1)*itl; rep.Latency.Min < want {
		t.Errorf("latency min: got %v, want at least %v", rep.Latency.Min, want)
	}
	// A stalled reader may read two chunks at once (a gap of 0), but the gaps of a stream add
	// up to at least the (tokens-1) delays between its first and last token.
	if rep.ITL.Mean < itl {
		t.Errorf("itl mean: got %v, want at least %v", rep.ITL.Mean, itl)
	}
}

// TestUpstreamConnectionHandling covers keep-alive, Expect: 100-continue, Connection: close and
// an oversized body on a raw connection.
func TestUpstreamConnectionHandling(t *testing.T) {
	up, url := startUpstream(t, UpstreamConfig{Tokens: 2})
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	body := `{"stream":false}`
	req := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n" + body +
		"POST /v1/messages HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 16\r\n\r\n" + body +
		"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 16\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	want := string(up.fixed[upAnthropicJSON])
	want = want + "HTTP/1.1 100 Continue\r\n\r\n" + want + want
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("pipelined responses:\ngot  %q\nwant %q", got, want)
	}

	conn2, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	_ = conn2.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn2, "POST /v1/messages HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(conn2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 413 ")) {
		t.Errorf("oversized body: got %q, want a 413 and the connection closed", got)
	}
}

func TestNewUpstreamErrors(t *testing.T) {
	for _, cfg := range []UpstreamConfig{{Tokens: -1}, {Tokens: 70000}, {ITL: -time.Second}} {
		if _, err := NewUpstream(cfg); err == nil {
			t.Errorf("NewUpstream(%+v): got no error, want one", cfg)
		}
	}
}

// BenchmarkUpstreamReadRequest measures the upstream's request reading and routing; its whole
// round trip with the generator's client is in BenchmarkRoundTrip.
func BenchmarkUpstreamReadRequest(b *testing.B) {
	body, _, err := requestBody(llm.FormatAnthropic, "m", "hello", 100, true, binary.Mode{})
	if err != nil {
		b.Fatal(err)
	}
	raw := []byte("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nContent-Type: application/json\r\n" +
		"Anthropic-Version: 2023-06-01\r\nX-Api-Key: k\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
	up, err := NewUpstream(UpstreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	rd := bytes.NewReader(raw)
	br := bufio.NewReaderSize(rd, 16<<10)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(raw)
		br.Reset(rd)
		req, err := readUpstreamRequest(br, buf[:0])
		if err != nil {
			b.Fatal(err)
		}
		buf = req.body
		if up.route(&req) != upAnthropicSSE {
			b.Fatal("wrong route")
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestUpstreamGolden pins the upstream's precomputed responses, head and body, in testdata/
// (regenerate with go test -run TestUpstreamGolden -update and review the diff).
func TestUpstreamGolden(t *testing.T) {
	up, err := NewUpstream(UpstreamConfig{Tokens: 3, Model: "golden"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		file string
		r    upstreamResponse
	}{
		{"anthropic.json.golden", upAnthropicJSON},
		{"anthropic.sse.golden", upAnthropicSSE},
		{"openai.json.golden", upOpenAIJSON},
		{"openai.sse.golden", upOpenAISSE},
		{"binary-v1.golden", upBinary},
		{"binary-v2.golden", upBinaryV2},
		{"models.golden", upModels},
		{"bad-binary.golden", upBadBinary},
	} {
		path := filepath.Join("testdata", "upstream", tt.file)
		got := up.fixed[tt.r]
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the upstream's response:\ngot  %q\nwant %q", path, got, want)
		}
	}
}
