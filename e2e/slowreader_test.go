package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Clients that stop reading a stream — an HTTP/1.1 socket never read, an HTTP/2 connection
// whose streams never get window — fail their own requests when the write timeout passes;
// they must not count against the engine that was serving them: no ejection, no open breaker,
// /readyz stays 200, and other clients are served. Through an edge → core chain the edge
// does not eject the core either.

// slowReaders is how many stalled clients each test runs: more than the ejection and breaker
// thresholds of slowReaderRouting.
const slowReaders = 5

// slowReaderRouting ejects a replica after two faults in a row and opens its breaker from
// four requests on: each stalled client, counted against the engine, would trip both.
const slowReaderRouting = `
routing:
  ejection: {consecutive_failures: 2}
  breaker: {min_requests: 4}
`

// echoBody is a streamed Anthropic request of model whose echoed answer (tens of megabytes of
// events) is more than any socket buffers.
func echoBody(model string) string {
	return `{"model":"` + model + `","max_tokens":1000000,"stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat("word ", 150000) + `"}]}`
}

// stallH1 sends body to path on a raw HTTP/1.1 connection that it never reads.
func stallH1(t *testing.T, addr, path, body string) {
	t.Helper()
	c := dial(t, addr)
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, hardKey, hardKey, len(body), body); err != nil {
		t.Fatal(err)
	}
}

// stallH2C opens one h2c connection (prior knowledge) that sets its streams' initial window to
// 0 and never grants any, and sends n streamed requests of body to path on it. It reads the
// server's frames (acknowledging its SETTINGS) without ever sending WINDOW_UPDATE.
func stallH2C(t *testing.T, addr, path, body string, n int) {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", addr},
			{"content-type", "application/json"}, {"x-api-key", hardKey}, {"authorization", "Bearer " + hardKey},
			{"content-length", strconv.Itoa(len(body))}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	go func() { // the frames' reader; it ends when the test closes the connection
		for range 100000 {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
				if fr.WriteSettingsAck() != nil {
					return
				}
			}
		}
	}()
}

// waitEnded waits until base's metrics count n requests for model that did not end well, for
// at most limit, and fails if any ended well (the answer fit in the buffers: nothing stalled).
func waitEnded(t *testing.T, base, model string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var ended float64
		for _, o := range []string{"stream_error", "canceled", "error"} {
			v, _ := findMetric(t, base, "layer0_requests_total", `model="`+model+`"`, `outcome="`+o+`"`)
			ended += v
		}
		if ok, _ := findMetric(t, base, "layer0_requests_total", `model="`+model+`"`, `outcome="ok"`); ok > 0 {
			t.Fatalf("%v stalled requests ended well: nothing stalled", ok)
		}
		if ended >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %v of %d stalled requests had ended", limit, ended, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stillServing checks that base is ready and serves model to a client that reads.
func stillServing(t *testing.T, base, model string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: got %d %s, want 200: stalled clients counted against the engine", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(
		`{"model":"`+model+`","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`))
	req.Header.Set("X-Api-Key", hardKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "message_stop") {
		t.Errorf("a reading client: got %d, want a whole stream:\n%.500s", resp.StatusCode, b)
	}
}

// TestSlowReadersDoNotEjectReplica stalls HTTP/1.1 clients (on each server of cleartext
// HTTP/1.1) and an h2c connection's streams against a gateway with a short write timeout.
func TestSlowReadersDoNotEjectReplica(t *testing.T) {
	cfg := func(t *testing.T) string {
		return fmt.Sprintf(`
server: {write_timeout: 1s}
engines:
  echo: {kind: sim, sim: {mode: echo}}
  lorem: {kind: sim}
models: {sim: {engines: [echo]}, lorem: {engines: [lorem]}}
keys: [{name: tester, hash: %s}]
`, authHash(hardKey)) + slowReaderRouting
	}
	stall := map[string]func(t *testing.T, addr string){
		"h1": func(t *testing.T, addr string) {
			for range slowReaders {
				stallH1(t, addr, "/v1/messages", echoBody("sim"))
			}
		},
		// No window at all, and an answer of megabytes, more than the server buffers for a
		// stream.
		"h2c": func(t *testing.T, addr string) {
			stallH2C(t, addr, "/v1/messages", `{"model":"lorem","max_tokens":100000,"stream":true,"messages":[{"role":"user","content":"hello"}]}`, slowReaders)
		},
	}
	forFronts(t, func(t *testing.T) {
		for _, proto := range []string{"h1", "h2c"} {
			t.Run(proto, func(t *testing.T) {
				_, addr, logs := serveListener(t, parseConfig(t, cfg(t)))
				base := "http://" + addr
				stall[proto](t, addr)
				model := map[string]string{"h1": "sim", "h2c": "lorem"}[proto]
				waitEnded(t, base, model, slowReaders, 20*time.Second)
				stillServing(t, base, model)
				if l := logs.String(); strings.Contains(l, "replica ejected") || strings.Contains(l, "breaker opened") {
					t.Errorf("stalled clients counted against the engine:\n%.3000s", l)
				}
			})
		}
	})
}

// TestSlowReadersDoNotEjectCore stalls clients of an edge gateway in front of a core gateway,
// on the layer0 engine (canonical events) and on the OpenAI pass-through: neither the edge's
// replica of the core nor the core's engine is ejected.
func TestSlowReadersDoNotEjectCore(t *testing.T) {
	keys := fmt.Sprintf("keys: [{name: tester, hash: %s}]\n", authHash(hardKey))
	// The core's own write timeout is longer than the edge's, as a core behind an edge is
	// deployed: with both at 1s, a CPU-starved edge that reads its upstream late can be cut off
	// by the core first, and then the core rightly looks failed to it.
	_, coreAddr, coreLogs := serveListener(t, parseConfig(t, `
server: {write_timeout: 10s}
engines: {echo: {kind: sim, sim: {mode: echo}}}
models: {sim: {engines: [echo]}}
`+keys+slowReaderRouting))
	core := "http://" + coreAddr
	t.Setenv("LAYER0_TEST_CORE_KEY", hardKey)
	_, edgeAddr, edgeLogs := serveListener(t, parseConfig(t, `
server: {write_timeout: 1s}
engines:
  core: {kind: layer0, url: "`+core+`", api_key_env: LAYER0_TEST_CORE_KEY, max_concurrency: `+strconv.Itoa(slowReaders)+`}
  core-openai: {kind: openai, url: "`+core+`/v1", api_key_env: LAYER0_TEST_CORE_KEY, max_concurrency: `+strconv.Itoa(slowReaders)+`}
models:
  chain: {engines: [core], upstream_model: sim}
  oaichain: {engines: [core-openai], upstream_model: sim}
`+keys+slowReaderRouting))
	edge := "http://" + edgeAddr
	oaiBody := `{"model":"oaichain","max_tokens":1000000,"stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat("word ", 150000) + `"}]}`
	for _, tc := range []struct{ model, path, body string }{
		{"chain", "/v1/messages", echoBody("chain")},
		{"oaichain", "/v1/chat/completions", oaiBody},
	} {
		t.Run(tc.model, func(t *testing.T) {
			// Three: enough to eject (two in a row), few enough for tens of megabytes through two
			// gateways under the race detector.
			for range 3 {
				stallH1(t, edgeAddr, tc.path, tc.body)
			}
			waitEnded(t, edge, tc.model, 3, time.Minute)
			stillServing(t, edge, "chain")
			stillServing(t, core, "sim")
		})
	}
	for name, l := range map[string]string{"edge": edgeLogs.String(), "core": coreLogs.String()} {
		if strings.Contains(l, "replica ejected") || strings.Contains(l, "breaker opened") {
			t.Errorf("%s: stalled clients counted against an engine:\n%.3000s", name, l)
		}
	}
}
