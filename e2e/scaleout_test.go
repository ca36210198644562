package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/store/redistest"
)

// replicas serves n gateways with the same configuration on their own loopback listeners, the
// store section pointing at srv, and returns their base URLs.
func replicas(t *testing.T, n int, srv *redistest.Server, store, rest string, opts ...layer0.Option) []string {
	t.Helper()
	var bases []string
	for range n {
		_, base := serveGateway(t, parseConfig(t, fmt.Sprintf("store: {kind: redis, url: %q, %s}\n%s", srv.URL(), store, rest)), opts...)
		bases = append(bases, base)
	}
	return bases
}

// exactReplicas serves three gateways on srv with the store options store, their clocks frozen
// (so a bucket does not refill), a key with secret limited to 100 requests a minute and the
// sim as the model "m", and returns their base URLs.
func exactReplicas(t *testing.T, srv *redistest.Server, store, secret string) []string {
	t.Helper()
	t0 := time.Now()
	frozen := layer0.WithClock(func() time.Time { return t0 })
	return replicas(t, 3, srv, store, `
keys:
  - {name: a, hash: `+authHash(secret)+`, limits: {requests_per_minute: 100}}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
`, frozen)
}

var scaleClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}

// postMessage sends a one-token message with key and returns the status, the retry-after header
// and the body.
func postMessage(t testing.TB, base, key string) (int, string, string) {
	return postModel(t, base, key, "m")
}

// TestGatewayReplicasExactOnRedis: three gateways on one Redis, a key limited to 100 requests
// per minute, 1000 requests spread over the three as fast as they go: exactly 100 succeed. The
// replicas' clocks stand still (and agree), so the bucket's refill — one request every 600ms —
// does not blur the count however slow the machine is.
func TestGatewayReplicasExactOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	bases := exactReplicas(t, srv, "timeout: 5s", "l0-scale")
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < 1000; i = next.Add(1) - 1 {
				code, _, body := postMessage(t, bases[i%3], "l0-scale")
				switch code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					t.Errorf("request %d: %d %.200s", i, code, body)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 100 || limited.Load() != 900 {
		t.Errorf("across 3 replicas: %d succeeded, %d limited; want exactly 100 and 900", ok.Load(), limited.Load())
	}
}

// TestGatewayReplicasConcurrencyOnRedis: a key limited to 10 concurrent requests, 30 slow
// requests at once over three gateways: exactly 10 are served, the others refused.
func TestGatewayReplicasConcurrencyOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	bases := replicas(t, 3, srv, "timeout: 5s", `
keys:
  - {name: a, hash: `+authHash("l0-conc")+`, limits: {concurrent: 10}}
engines:
  sim: {kind: sim, sim: {ttft: 3s}}
models:
  m: {engines: [sim]}
`)
	var mu sync.Mutex
	var ok, limited int
	var lastStart, firstEnd time.Time
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, _, body := postMessage(t, bases[i%3], "l0-conc")
			end := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if start.After(lastStart) {
				lastStart = start
			}
			switch code {
			case http.StatusOK:
				ok++
				if firstEnd.IsZero() || end.Before(firstEnd) {
					firstEnd = end
				}
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Errorf("request %d: %d %.200s", i, code, body)
			}
		}()
	}
	wg.Wait()
	if !lastStart.Before(firstEnd) {
		t.Fatalf("the last request started %v after the first served one ended: they did not all overlap, the count proves nothing",
			lastStart.Sub(firstEnd))
	}
	if ok != 10 || limited != 20 {
		t.Errorf("30 overlapping requests over 3 replicas: %d served, %d refused; want 10 and 20", ok, limited)
	}
}

// TestGatewayReplicasRedisFault stops Redis under load and starts it again. With on_error allow
// no request fails, /readyz stays ready and the errors are counted; with deny the only failures
// are 503s with retry-after, and requests succeed again once Redis is back.
func TestGatewayReplicasRedisFault(t *testing.T) {
	for _, mode := range []string{"allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			bases := replicas(t, 3, srv, "timeout: 2s, replicas: 3, on_error: "+mode, `
keys:
  - {name: a, hash: `+authHash("l0-fault")+`, limits: {requests_per_minute: 1000000, concurrent: 100}}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
`)
			var down atomic.Bool
			var upAt atomic.Int64
			var okUp, okDown, refusedDown atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						wasDown := down.Load()
						code, retry, body := postMessage(t, bases[(w+i)%3], "l0-fault")
						isDown := down.Load()
						switch {
						case code == http.StatusOK && !wasDown && !isDown:
							okUp.Add(1)
						case code == http.StatusOK:
							okDown.Add(1)
						case mode == "deny" && code == http.StatusServiceUnavailable && retry != "" && (wasDown || isDown):
							refusedDown.Add(1)
						case mode == "deny" && code == http.StatusServiceUnavailable && retry != "" &&
							time.Since(time.Unix(0, upAt.Load())) < 1500*time.Millisecond:
							// Redis just came back: each store sees it at its next probe (every 100ms).
							refusedDown.Add(1)
						default:
							t.Errorf("%s, redis down %v: %d retry-after %q %.200s", mode, isDown, code, retry, body)
						}
					}
				}()
			}
			time.Sleep(300 * time.Millisecond)
			down.Store(true)
			srv.Stop()
			time.Sleep(time.Second)
			if mode == "allow" {
				for _, b := range bases {
					resp, err := scaleClient.Get(b + "/readyz")
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("/readyz with Redis down (allow): %d, want 200", resp.StatusCode)
					}
				}
			}
			srv.Restart()
			upAt.Store(time.Now().UnixNano())
			down.Store(false)
			before := okUp.Load()
			time.Sleep(2 * time.Second)
			close(stop)
			wg.Wait()
			if okUp.Load() <= before {
				t.Errorf("no request succeeded in the second after Redis came back")
			}
			switch mode {
			case "allow":
				if okDown.Load() == 0 {
					t.Errorf("no request served while Redis was down")
				}
				var errs float64
				for _, b := range bases {
					errs += metricValue(t, b, "layer0_store_errors_total")
				}
				if errs == 0 {
					t.Errorf("layer0_store_errors_total is 0 on every replica after an outage")
				}
			case "deny":
				if refusedDown.Load() == 0 {
					t.Errorf("no 503 while Redis was down")
				}
			}
			t.Logf("%s: %d served with Redis up, %d while down, %d refused while down", mode, okUp.Load(),
				okDown.Load(), refusedDown.Load())
		})
	}
}

// TestGatewayReloadOntoRedis: a gateway reloaded from the in-memory store onto Redis counts in
// Redis from then on (not in its old in-memory cells), so it shares the limit with a replica
// that was on Redis all along; a reload that keeps the store keeps the counts.
func TestGatewayReloadOntoRedis(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Now()
	frozen := layer0.WithClock(func() time.Time { return t0 })
	rest := `
keys:
  - {name: a, hash: ` + authHash("l0-reload") + `, limits: {requests_per_minute: 4}}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
`
	onRedis := fmt.Sprintf("store: {kind: redis, url: %q, timeout: 5s}\n%s", srv.URL(), rest)
	g, a := serveGateway(t, parseConfig(t, rest), frozen)
	_, b := serveGateway(t, parseConfig(t, onRedis), frozen)
	if code, _, body := postMessage(t, a, "l0-reload"); code != http.StatusOK {
		t.Fatalf("on memory: %d %s", code, body)
	}
	if err := g.Reload(parseConfig(t, onRedis)); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if code, _, body := postMessage(t, []string{a, b}[i%2], "l0-reload"); code != http.StatusOK {
			t.Fatalf("request %d of the 4 on Redis: %d %s", i, code, body)
		}
	}
	for _, base := range []string{a, b} {
		if code, _, _ := postMessage(t, base, "l0-reload"); code != http.StatusTooManyRequests {
			t.Errorf("a 5th request on Redis: %d, want 429 on both replicas", code)
		}
	}
	// Reloading the same store keeps the counts: still refused.
	if err := g.Reload(parseConfig(t, onRedis)); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := postMessage(t, a, "l0-reload"); code != http.StatusTooManyRequests {
		t.Errorf("after a reload with the same store: %d, want 429", code)
	}
}
