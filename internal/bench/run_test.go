package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/testcert"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// startUpstream serves an Upstream on a fresh loopback port and returns its base URL.
func startUpstream(t testing.TB, cfg UpstreamConfig) (*Upstream, string) {
	t.Helper()
	up, err := NewUpstream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Serve(ln) }()
	t.Cleanup(func() {
		if err := up.Close(); err != nil {
			t.Errorf("upstream close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("upstream serve: %v", err)
		}
	})
	return up, "http://" + ln.Addr().String()
}

// startH2 serves an Upstream through net/http with HTTP/1.1 and h2c, or with TLS and h2.
func startH2(t testing.TB, up *Upstream, tls bool) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(up)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // clients closing idle TLS connections are not news
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	if tls {
		srv.Config.Protocols.SetHTTP2(true)
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.URL
}

// startH3 serves an Upstream as layer0 serves HTTP/3: TLS (HTTP/2) on a TCP port and QUIC on the
// same UDP port, with a fresh self-signed certificate. It returns the https URL.
func startH3(t testing.TB, up *Upstream) string {
	t.Helper()
	certFile, keyFile, _ := testcert.Write(t, t.TempDir())
	srv := server.HTTPServer(up, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := server.Listen("127.0.0.1:0", server.ConnLimit{})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := server.ListenHTTP3(srv, ln)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	go func() { done <- hs.Serve(ctx, time.Second) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return "https://" + ln.Addr().String()
}

// TestRunFormats makes short bounded runs in every format and transport against the upstream
// and checks that the report adds up and its JSON is valid.
func TestRunFormats(t *testing.T) {
	const tokens, requests = 9, 24
	up, h1 := startUpstream(t, UpstreamConfig{Tokens: tokens})
	h2c := startH2(t, up, false)
	h2tls := startH2(t, up, true)
	h3 := startH3(t, up)
	type transport struct {
		name, url      string
		http2, nethttp bool
		want           string // Report.Client
		http3          bool
	}
	transports := []transport{
		{"raw h1", h1, false, false, "layer0", false},
		{"net/http h1", h1, false, true, "net/http", false},
		{"h2c", h2c, true, false, "net/http", false},
		{"h2 tls", h2tls, true, false, "net/http", false},
		{"h3", h3, false, false, "quic-go", true},
	}
	formats := []struct {
		format llm.Format
		stream bool
		binVer int
	}{
		{llm.FormatAnthropic, false, 0}, {llm.FormatAnthropic, true, 0},
		{llm.FormatOpenAI, false, 0}, {llm.FormatOpenAI, true, 0},
		{llm.FormatBinary, true, 1}, {llm.FormatBinary, true, 2},
	}
	for _, tr := range transports {
		for _, f := range formats {
			for _, open := range []bool{false, true} {
				name := tr.name + "/" + f.format.String()
				if f.stream {
					name += "-stream"
				}
				if f.binVer > 0 {
					name += fmt.Sprintf("-v%d", f.binVer)
				}
				if open {
					name += "/open"
				}
				t.Run(name, func(t *testing.T) {
					cfg := Config{URL: tr.url, Format: f.format, Stream: f.stream, BinaryVersion: f.binVer, HTTP2: tr.http2, HTTP3: tr.http3,
						NetHTTP: tr.nethttp, Insecure: true, Requests: requests, Connections: 3, Timeout: 10 * time.Second}
					if open {
						cfg.Rate = 2000
					}
					rep, err := Run(context.Background(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					if rep.OK != requests || rep.Sent != requests || rep.Failed != 0 {
						t.Fatalf("got sent %d ok %d failed %d (%v %v), want %d ok", rep.Sent, rep.OK, rep.Failed, rep.Errors, rep.ErrorSamples, requests)
					}
					if got, want := rep.Tokens, uint64(tokens*requests); got != want {
						t.Errorf("tokens: got %d, want %d", got, want)
					}
					if got, want := rep.TokenEvents, uint64(tokens*requests); got != want {
						t.Errorf("token events: got %d, want %d", got, want)
					}
					if !open && (rep.PeakInFlight < 1 || rep.PeakInFlight > 3) {
						t.Errorf("peak in flight: got %d, want 1 to 3 (the connections)", rep.PeakInFlight)
					}
					if got, want := rep.Client, tr.want; got != want {
						t.Errorf("client: got %q, want %q", got, want)
					}
					if rep.BytesPerToken <= 0 || rep.Throughput <= 0 || rep.Elapsed <= 0 {
						t.Errorf("got bytes/token %v, throughput %v, elapsed %v; want all positive", rep.BytesPerToken, rep.Throughput, rep.Elapsed)
					}
					// The wire carries the bodies and more: heads, framing, encryption.
					if w := rep.Wire; w.Received <= rep.Bytes || w.Sent == 0 || w.PerToken <= 0 ||
						w.ReceivedPerRequest*requests != float64(w.Received) {
						t.Errorf("wire: got %+v with %d body bytes received, want more than the bodies", w, rep.Bytes)
					}
					if rep.Latency.Count != requests || rep.Latency.P50 <= 0 || rep.Latency.P50 > rep.Latency.Max {
						t.Errorf("latency: got %+v", rep.Latency)
					}
					streamed := f.stream || f.format == llm.FormatBinary
					if wantTTFT := uint64(0); streamed {
						wantTTFT = requests
						if rep.TTFT.Count != wantTTFT || rep.TTFT.Max > rep.Latency.Max {
							t.Errorf("ttft: got %+v, want %d values within latency max %v", rep.TTFT, wantTTFT, rep.Latency.Max)
						}
						if got, want := rep.ITL.Count, uint64((tokens-1)*requests); got != want {
							t.Errorf("itl count: got %d, want %d", got, want)
						}
					} else if rep.TTFT.Count != 0 || rep.ITL.Count != 0 {
						t.Errorf("non-streamed: got ttft %d itl %d values, want none", rep.TTFT.Count, rep.ITL.Count)
					}
					var buf bytes.Buffer
					if err := json.NewEncoder(&buf).Encode(rep); err != nil {
						t.Fatal(err)
					}
					var back Report
					if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
						t.Fatalf("report JSON does not decode: %v", err)
					}
					if diff := cmp.Diff(*rep, back); diff != "" {
						t.Errorf("JSON round trip (-report +decoded):\n%s", diff)
					}
					var text strings.Builder
					if err := rep.WriteText(&text); err != nil {
						t.Fatal(err)
					}
					for _, want := range []string{"throughput", "latency", "bytes/token", "per request"} {
						if !strings.Contains(text.String(), want) {
							t.Errorf("text report lacks %q:\n%s", want, text.String())
						}
					}
				})
			}
		}
	}
}

// slowServer answers one request at a time, each taking at least service.
func slowServer(t *testing.T, service time.Duration) string {
	t.Helper()
	up, err := NewUpstream(UpstreamConfig{Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		time.Sleep(service)
		up.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestOpenLoopMeasuresFromSchedule: requests due every millisecond against a server that takes
// 10ms each, with one worker: each request waits for the ones before it, and that wait is part
// of its latency, which therefore grows with its position in the queue.
func TestOpenLoopMeasuresFromSchedule(t *testing.T) {
	const service, n = 10 * time.Millisecond, 12
	url := slowServer(t, service)
	rep, err := Run(context.Background(), Config{URL: url, Rate: 1000, Requests: n, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK != n {
		t.Fatalf("got %d ok (%v), want %d", rep.OK, rep.Errors, n)
	}
	// The last request is due at 11ms and cannot end before 12 services: 120ms - 11ms.
	if got, want := rep.Latency.Max, n*service-(n-1)*time.Millisecond; got < want {
		t.Errorf("latency max: got %v, want at least %v (queueing counted from the schedule)", got, want)
	}
	if got, want := rep.SendLag.Max, (n-1)*service-(n-1)*time.Millisecond; got < want {
		t.Errorf("send lag max: got %v, want at least %v", got, want)
	}
	if rep.Late == 0 || rep.Blocked == 0 {
		t.Errorf("got late %d, blocked %d; want both counted", rep.Late, rep.Blocked)
	}
	if rep.PeakInFlight != 1 {
		t.Errorf("peak in flight: got %d, want 1 (the pool's bound)", rep.PeakInFlight)
	}

	// The same load closed-loop measures each request from its own send: no queueing counted,
	// which is exactly the coordinated omission the open loop avoids.
	closed, err := Run(context.Background(), Config{URL: url, Connections: 1, Requests: n})
	if err != nil {
		t.Fatal(err)
	}
	if closed.Late != 0 || closed.SendLag.Max != 0 {
		t.Errorf("closed loop: got late %d, lag max %v; want none", closed.Late, closed.SendLag.Max)
	}
	if closed.Latency.Max >= rep.Latency.Max {
		t.Errorf("closed loop latency max %v is not below open loop's %v", closed.Latency.Max, rep.Latency.Max)
	}
}

// TestRunErrorKinds checks that failures are counted by kind.
func TestRunErrorKinds(t *testing.T) {
	sse := func(evs ...string) string { return sseEvents(evs...) }
	delta := `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`
	tests := []struct {
		name    string
		handler http.HandlerFunc
		format  llm.Format
		stream  bool
		want    string
	}{
		{"status 429", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`))
		}, llm.FormatAnthropic, false, "status_429"},
		{"stream error event", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(sse("content_block_delta", delta, "error", `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`)))
		}, llm.FormatAnthropic, true, "stream_error"},
		{"truncated stream", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(sse("content_block_delta", delta)))
		}, llm.FormatAnthropic, true, "truncated"},
		{"binary error frame", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(binaryBody(frame(byte(binary.FrameError), 1, 244, 'e'), frame(byte(binary.FrameDone))))
		}, llm.FormatBinary, true, "stream_error"},
		{"binary bad magic", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("NOPE"))
		}, llm.FormatBinary, true, "protocol"},
		{"json without usage", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{}`))
		}, llm.FormatOpenAI, false, "protocol"},
		{"connection cut mid-body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("data: x\n"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, llm.FormatOpenAI, true, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			rep, err := Run(context.Background(), Config{URL: srv.URL, Format: tt.format, Stream: tt.stream, Requests: 3, Connections: 1})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]uint64{tt.want: 3}, rep.Errors); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if rep.OK != 0 || rep.Failed != 3 || rep.ErrorSamples[tt.want] == "" {
				t.Errorf("got ok %d failed %d samples %v; want 0 ok, 3 failed, a sample", rep.OK, rep.Failed, rep.ErrorSamples)
			}
		})
	}

	t.Run("transport", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		rep, err := Run(context.Background(), Config{URL: "http://" + addr, Requests: 2})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]uint64{"transport": 2}, rep.Errors); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
		}))
		defer srv.Close()
		defer close(release)
		rep, err := Run(context.Background(), Config{URL: srv.URL, Requests: 1, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]uint64{"timeout": 1}, rep.Errors); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})
}

func TestRunStopsWhenCanceled(t *testing.T) {
	_, url := startUpstream(t, UpstreamConfig{Tokens: 5, TTFT: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var progress syncbuf.Buffer
	done := make(chan *Report, 1)
	go func() {
		rep, err := Run(ctx, Config{URL: url, Rate: 200, Duration: time.Hour, Progress: &progress})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(300 * time.Millisecond) // let the progress bar draw once
	cancel()
	select {
	case rep := <-done:
		if rep == nil {
			return
		}
		if rep.OK == 0 {
			t.Errorf("got no successful requests before the cancel: %+v", rep.Errors)
		}
		if rep.Sent != rep.OK+rep.Failed {
			t.Errorf("got sent %d, ok %d, failed %d: some requests unaccounted for", rep.Sent, rep.OK, rep.Failed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of the cancel")
	}
	out := progress.String()
	if !strings.HasPrefix(out, "\r[") || !strings.HasSuffix(out, "\n") || !strings.Contains(out, "p99") {
		t.Errorf("progress output: got %q, want \\r-rewritten lines ending with a newline", out)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no url", Config{}, "URL is required"},
		{"bad scheme", Config{URL: "ftp://x"}, "want http://host:port"},
		{"negative rate", Config{URL: "http://x", Rate: -1}, "rate -1"},
		{"negative count", Config{URL: "http://x", Requests: -1}, "must not be negative"},
		{"binary max tokens", Config{URL: "http://x", Format: llm.FormatBinary, MaxTokens: 70000}, "max_tokens 70000"},
		{"h3 cleartext", Config{URL: "http://x", HTTP3: true}, "needs an https URL"},
		{"h2 and h3", Config{URL: "https://x", HTTP2: true, HTTP3: true}, "exclusive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRawClientDoesNotAllocate guards the generator's per-request cost: one whole request and
// streamed response on a kept-alive connection allocates nothing.
func TestRawClientDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	_, url := startUpstream(t, UpstreamConfig{Tokens: 20})
	for _, f := range []struct {
		format llm.Format
		stream bool
		binVer int
	}{{llm.FormatAnthropic, true, 0}, {llm.FormatOpenAI, true, 0}, {llm.FormatBinary, true, 1}, {llm.FormatBinary, true, 2},
		{llm.FormatAnthropic, false, 0}} {
		r, w := newTestWorker(t, Config{URL: url, Format: f.format, Stream: f.stream, BinaryVersion: f.binVer})
		ctx := context.Background()
		w.do(ctx, -1) // dial and grow buffers
		allocs := testing.AllocsPerRun(200, func() { w.do(ctx, -1) })
		w.cl.close()
		if s := r.snapshot(); s.ok != 201+1 || s.failed() != 0 {
			t.Fatalf("%v: got %d ok, %d failed, want all ok", f.format, s.ok, s.failed())
		}
		if allocs != 0 {
			t.Errorf("%v stream=%v: got %v allocs per request, want 0", f.format, f.stream, allocs)
		}
	}
}

// newTestWorker builds a runner and one worker as Run would.
func newTestWorker(t testing.TB, cfg Config) (*runner, *worker) {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	body, ctype, err := requestBody(cfg.Format, cfg.Model, cfg.Prompt, cfg.MaxTokens, cfg.Stream, cfg.binaryMode())
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: cfg, kind: parserKindFor(cfg.Format, cfg.Stream), shards: make([]shard, 1), base: time.Now()}
	newClient, closeAll, err := clientFactory(cfg, body, requestHeader(cfg.Format, ctype, "", nil), &r.wire)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	r.newClient = newClient
	return r, r.newWorker(0)
}

// BenchmarkRoundTrip is the generator's cost per request (client and in-process upstream
// together, over loopback): the raw client against net/http's.
func BenchmarkRoundTrip(b *testing.B) {
	up, url := startUpstream(b, UpstreamConfig{Tokens: 100})
	h2c := startH2(b, up, false)
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"raw/anthropic-json", Config{URL: url}},
		{"raw/anthropic-sse", Config{URL: url, Stream: true}},
		{"raw/openai-sse", Config{URL: url, Format: llm.FormatOpenAI, Stream: true}},
		{"raw/binary", Config{URL: url, Format: llm.FormatBinary}},
		{"raw/binary-v2", Config{URL: url, Format: llm.FormatBinary, BinaryVersion: 2}},
		{"nethttp/anthropic-sse", Config{URL: url, Stream: true, NetHTTP: true}},
		{"h2c/anthropic-sse", Config{URL: h2c, Stream: true, HTTP2: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			_, w := newTestWorker(b, bc.cfg)
			defer w.cl.close()
			ctx := context.Background()
			for b.Loop() {
				w.do(ctx, -1)
			}
			if w.p.tokens != 100 {
				b.Fatalf("got %d tokens, want 100", w.p.tokens)
			}
		})
	}
}

// TestWireCountsExactly checks the TCP count against what is known to cross: the raw HTTP/1.1
// client writes its prebuilt request, byte for byte, once per request, and reads at least each
// response's body and head.
func TestWireCountsExactly(t *testing.T) {
	_, url := startUpstream(t, UpstreamConfig{Tokens: 5})
	const requests = 10
	cfg := Config{URL: url, Format: llm.FormatAnthropic, Stream: true, Requests: requests, Timeout: 10 * time.Second}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK != requests {
		t.Fatalf("got %d ok (%v), want %d", rep.OK, rep.ErrorSamples, requests)
	}
	full, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	body, ctype, err := requestBody(full.Format, full.Model, full.Prompt, full.MaxTokens, full.Stream, full.binaryMode())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := neturl.Parse(full.URL)
	req, err := rawRequest(u, body, requestHeader(full.Format, ctype, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(requests * len(req)); rep.Wire.Sent != want {
		t.Errorf("sent %d bytes, want %d: %d requests of %d", rep.Wire.Sent, want, requests, len(req))
	}
	if rep.Wire.Received <= rep.Bytes+uint64(requests*len("HTTP/1.1 200 OK\r\n")) {
		t.Errorf("received %d bytes for %d body bytes: fewer than the bodies and status lines", rep.Wire.Received, rep.Bytes)
	}
}
