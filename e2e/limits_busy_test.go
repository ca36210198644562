package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/layer0ai/layer0/internal/upstream/fake"
	"github.com/redis/go-redis/v9"
)

// burnCPU keeps every core busy for the rest of the test, at most limit: two spinning goroutines
// per core, which the Go scheduler preempts only every 10ms or so, so the gateways' goroutines
// (and redis-server) wait for a core as on a loaded machine.
func burnCPU(t *testing.T, limit time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	end := time.Now().Add(limit)
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for time.Now().Before(end) {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 200_000 {
					x += i
				}
			}
			_ = x
		}()
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
}

// TestGatewayReplicasExactOnBusyMachine: three gateways on one Redis with the store's default
// timeout, every core kept busy, 30 clients sending 300 requests for a key limited to 100 per
// minute (the clocks frozen, so the bucket does not refill): 100 succeed, never more. A round
// trip that waits for a core is slow, not an outage: no replica falls back to its own counters.
// A request whose operation took longer than the timeout is refused with a 503 (it may have been
// counted), so the floor is 100 less those.
func TestGatewayReplicasExactOnBusyMachine(t *testing.T) {
	srv := redistest.Start(t)
	bases := exactReplicas(t, srv, "on_error: allow", "l0-busy")
	burnCPU(t, time.Minute)
	var ok, limited, unavailable atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < 300; i = next.Add(1) - 1 {
				code, retry, body := postMessage(t, bases[i%3], "l0-busy")
				switch {
				case code == http.StatusOK:
					ok.Add(1)
				case code == http.StatusTooManyRequests:
					limited.Add(1)
				case code == http.StatusServiceUnavailable && retry != "":
					unavailable.Add(1)
				default:
					t.Errorf("request %d: %d %.200s", i, code, body)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("300 requests, 3 replicas, busy machine: %d succeeded, %d limited, %d refused as the store answered late",
		ok.Load(), limited.Load(), unavailable.Load())
	if ok.Load() > 100 || ok.Load() < 100-unavailable.Load() {
		t.Errorf("%d succeeded (%d refused as late); want 100, never more, and less only by the late ones", ok.Load(), unavailable.Load())
	}
	if unavailable.Load() > 30 {
		t.Errorf("%d of 300 requests refused because the store answered later than its timeout", unavailable.Load())
	}
}

// concurrencyCounter counts the requests that loopback engines serve at once.
type concurrencyCounter struct {
	now  atomic.Int64
	peak atomic.Int64
}

// wrap returns next, counted.
func (c *concurrencyCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
		}
		next.ServeHTTP(w, r)
	})
}

// postModel sends a one-token message for model with key and returns the status, the
// retry-after header and the body.
func postModel(t testing.TB, base, key, model string) (int, string, string) {
	body := `{"model":"` + model + `","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := scaleClient.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// TestGatewayReplicasConcurrencyAfterFlushAll: three gateways on one Redis, a key limited to 4
// concurrent requests, engines on loopback that count how many requests they serve at once, on a
// busy machine. Two long requests (4s) hold slots through the third replica, which then gets no
// other traffic; Redis loses its state (FLUSHALL); 8 clients send short requests (150ms) over
// and over through the first two. The engines never serve more than 4 at once: the third replica
// finds the loss by its heartbeat and writes its two slots back, and the others admit nothing
// before it can have. Short requests are served after the flush.
func TestGatewayReplicasConcurrencyAfterFlushAll(t *testing.T) {
	srv := redistest.Start(t)
	var counter concurrencyCounter
	var fronts [2]*httptest.Server
	for i, d := range []time.Duration{4 * time.Second, 150 * time.Millisecond} {
		eng := fake.NewOpenAI(fake.Script{Text: "ok", FirstByte: d})
		t.Cleanup(eng.Close)
		fronts[i] = httptest.NewServer(counter.wrap(eng.Config.Handler))
		t.Cleanup(fronts[i].Close)
	}
	bases := replicas(t, 3, srv, "lease_ttl: 3s", fmt.Sprintf(`
keys:
  - {name: a, hash: %s, limits: {concurrent: 4}}
engines:
  long: {kind: openai, url: %q}
  short: {kind: openai, url: %q}
models:
  long: {engines: [long]}
  short: {engines: [short]}
`, authHash("l0-flush"), fronts[0].URL, fronts[1].URL))
	burnCPU(t, time.Minute)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, body := postModel(t, bases[2], "l0-flush", "long"); code != http.StatusOK {
				t.Errorf("long request: %d %.200s", code, body)
			}
		}()
	}
	for end := time.Now().Add(10 * time.Second); counter.now.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the two long requests did not reach the engine in 10s")
		}
	}
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	var ok, limited atomic.Int64
	stop := make(chan struct{})
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					return
				default:
				}
				code, retry, body := postModel(t, bases[(w+i)%2], "l0-flush", "short")
				switch {
				case code == http.StatusOK:
					ok.Add(1)
				case code == http.StatusTooManyRequests:
					limited.Add(1)
				case code == http.StatusServiceUnavailable && retry != "":
				default:
					t.Errorf("short request: %d %.200s", code, body)
				}
			}
		}()
	}
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("after the flush: %d short requests served, %d limited; the engines' peak: %d at once",
		ok.Load(), limited.Load(), counter.peak.Load())
	if ok.Load() == 0 || limited.Load() == 0 {
		t.Errorf("after the flush %d served, %d limited: the limit was not exercised", ok.Load(), limited.Load())
	}
	if p := counter.peak.Load(); p > 4 {
		t.Errorf("the engines served %d requests at once; the key's limit is 4", p)
	}
}
