package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// countedEngine is a fake OpenAI-compatible engine (with a metrics and a health endpoint)
// that counts the connections open to it.
type countedEngine struct {
	*httptest.Server
	open atomic.Int64
}

func newCountedEngine(t *testing.T) *countedEngine {
	t.Helper()
	f := fake.NewOpenAI(fake.Script{Text: "one two three", Gap: time.Millisecond})
	t.Cleanup(f.Close)
	e := &countedEngine{}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Write(metrics.AppendVLLM(nil, "m", metrics.Load{Running: 1})) //nolint:errcheck
		case "/health":
			w.WriteHeader(http.StatusOK)
		default:
			f.Config.Handler.ServeHTTP(w, r)
		}
	}))
	e.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			e.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			e.open.Add(-1)
		}
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

// settle waits (a bounded time) for cond, and reports whether it came true.
func settle(cond func() bool) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestGatewayReloadReleasesEngines reloads 100 times between two configurations that differ
// in an HTTP engine's settings — so that every reload builds a new engine — while requests
// flow to it through HTTP and through Do. Not one request fails (an engine is closed only
// once the requests of its generation have ended); afterwards only the live engine's
// connections are open, none once the gateway is closed, and the goroutines are back to
// their number before the gateway started.
func TestGatewayReloadReleasesEngines(t *testing.T) {
	eng := newCountedEngine(t)
	const text = `
engines:
  e: {kind: openai, url: "%s", metrics_path: /metrics, health_path: /health, timeouts: {idle: %s}}
models:
  m: {engines: [e]}
routing:
  utilization_interval: 5ms
  health: {interval: 5ms}
`
	cfgs := [2]*layer0.Config{parseConfig(t, fmt.Sprintf(text, eng.URL, "30s")), parseConfig(t, fmt.Sprintf(text, eng.URL, "31s"))}
	before := runtime.NumGoroutine()

	g, err := layer0.New(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	base := "http://" + ln.Addr().String()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := lifecycleRequest(g, hc, base, w, i); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for i := range 100 {
		if err := g.Reload(cfgs[(i+1)%2]); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		// Requests in flight overlap the next reload; at least two end on each generation.
		n := ok.Load() + failed.Load()
		settle(func() bool { return ok.Load()+failed.Load() >= n+2 })
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed during reloads; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 200 {
		t.Errorf("only %d requests completed during 100 reloads", ok.Load())
	}

	// The live engine keeps at most a connection per worker, and the probes one each.
	if !settle(func() bool { return eng.open.Load() <= 6 }) {
		t.Errorf("got %d connections open to the engine after 100 reloads, want at most 6 (the live engine's)", eng.open.Load())
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if !settle(func() bool { return eng.open.Load() == 0 }) {
		t.Errorf("got %d connections open to the engine after Close, want 0", eng.open.Load())
	}
	// A few goroutines of the runtime and of net/http may come and go on their own.
	const slack = 3
	if !settle(func() bool { return runtime.NumGoroutine() <= before+slack }) {
		buf := make([]byte, 1<<20)
		t.Errorf("got %d goroutines after Close, want at most %d; stacks:\n%s", runtime.NumGoroutine(), before+slack,
			buf[:runtime.Stack(buf, true)])
	}
}

// lifecycleRequest sends one request: over HTTP, streamed or not, or in-process with Do.
func lifecycleRequest(g *layer0.Gateway, hc *http.Client, base string, w, i int) error {
	if (w+i)%3 == 0 {
		req := &layer0.Request{Model: "m", MaxTokens: 8, Messages: []layer0.Message{
			{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "do " + strconv.Itoa(i)}}}}}
		var c layer0.Collector
		return g.Do(context.Background(), req, &c)
	}
	stream := i%2 == 0
	body := `{"model":"m","max_tokens":8,"stream":` + strconv.FormatBool(stream) +
		`,"messages":[{"role":"user","content":"reload ` + strconv.Itoa(i) + `"}]}`
	resp, err := hc.Post(base+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || stream && !strings.Contains(string(b), "event: message_stop") {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return nil
}
