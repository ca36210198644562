package layer0_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
)

// sharedPrefixPool is four sims with prefix caches of 4,096 tokens — about three of the
// workload's eight 1,000-token system prompts each, far from all eight — that take 10 ms plus
// 50 µs per uncached prompt token to the first token and run four sequences at once. The
// models pin0…pin3 are one replica each, for placement by group.
const sharedPrefixPool = `
engines:
  a: {kind: sim, sim: {ttft: 10ms, prefill_per_token: 50us, inter_token_latency: 1ms, max_concurrency: 4, kv_cache_tokens: 4096}}
  b: {kind: sim, sim: {ttft: 10ms, prefill_per_token: 50us, inter_token_latency: 1ms, max_concurrency: 4, kv_cache_tokens: 4096}}
  c: {kind: sim, sim: {ttft: 10ms, prefill_per_token: 50us, inter_token_latency: 1ms, max_concurrency: 4, kv_cache_tokens: 4096}}
  d: {kind: sim, sim: {ttft: 10ms, prefill_per_token: 50us, inter_token_latency: 1ms, max_concurrency: 4, kv_cache_tokens: 4096}}
models:
  pool: {engines: [a, b, c, d]}
  pin0: {engines: [a]}
  pin1: {engines: [b]}
  pin2: {engines: [c]}
  pin3: {engines: [d]}
`

// sharedPrefixResult is one placement's outcome on the shared-prefix workload.
type sharedPrefixResult struct {
	cacheShare         float64 // prompt tokens the engines served from their caches, of all
	p50, p90, p99      time.Duration
	perReplica         map[string]int
	picks              map[string]int // the prefix picker's decisions by reason
	requests, failures int
}

// runSharedPrefix drives the shared-prefix workload through a fresh gateway: groups of users
// sharing a long system prompt, each request a group's system prompt and a question of one of
// its users, sent by clients concurrent clients. hot is the share of requests that go to group
// 0 (0: groups drawn uniformly). With pin, group g goes to model pin(g mod 4) — each group on
// one replica — else to the pool under routing. TTFT and the cache share come from the access
// log: the gateway's time to the first token and the engines' cache_read_input_tokens.
func runSharedPrefix(t *testing.T, routing string, pin bool, hot float64) sharedPrefixResult {
	const (
		groups, usersPerGroup = 8, 4
		requests, clients     = 480, 16
	)
	var access syncBuffer
	_, base := serveGateway(t, parseConfig(t, routing+sharedPrefixPool), layer0.WithAccessLog(&access))
	rnd := rand.New(rand.NewPCG(1, 2)) // the same requests for every placement
	type job struct{ group, user, n int }
	jobs := make([]job, requests)
	for i := range jobs {
		g := rnd.IntN(groups)
		if hot > 0 {
			if rnd.Float64() < hot {
				g = 0
			} else {
				g = 1 + rnd.IntN(groups-1)
			}
		}
		jobs[i] = job{g, rnd.IntN(usersPerGroup), i}
	}
	next := make(chan job)
	var wg sync.WaitGroup
	var failures int
	var mu sync.Mutex
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				model := "pool"
				if pin {
					model = "pin" + strconv.Itoa(j.group%4)
				}
				system := strings.Repeat("Group "+strconv.Itoa(j.group)+" follows the house style guide, section by section. ", 90)
				user := "I am user " + strconv.Itoa(j.user) + " of group " + strconv.Itoa(j.group) + ", asking question " + strconv.Itoa(j.n) + "."
				body, _ := json.Marshal(prompt{Model: model, MaxTokens: 5, System: system, Messages: []cacheTurn{{"user", user}}})
				resp, err := http.Post(base+"/v1/messages", "application/json", bytes.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					mu.Lock()
					failures++
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()

	res := sharedPrefixResult{perReplica: map[string]int{}, picks: map[string]int{}, failures: failures}
	var ttfts []time.Duration
	var read, total int
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := strings.Split(strings.TrimSpace(access.String()), "\n")
		if len(lines) >= requests || time.Now().After(deadline) {
			for _, line := range lines {
				var r struct {
					Engine    string  `json:"engine"`
					Status    int     `json:"status"`
					Input     int     `json:"input_tokens"`
					CacheRead int     `json:"cache_read_input_tokens"`
					TTFT      float64 `json:"ttft_ms"`
					Pick      string  `json:"pick"`
					Skipped   string  `json:"pick_skipped"`
				}
				if json.Unmarshal([]byte(line), &r) != nil || r.Status != http.StatusOK {
					continue
				}
				res.requests++
				res.perReplica[r.Engine]++
				if r.Pick != "" {
					res.picks[r.Pick]++
				}
				if r.Skipped != "" {
					res.picks["skipped"]++
				}
				read += r.CacheRead
				total += r.Input + r.CacheRead
				ttfts = append(ttfts, time.Duration(r.TTFT*float64(time.Millisecond)))
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(ttfts) == 0 {
		t.Fatalf("%s: no request served", routing)
	}
	slices.Sort(ttfts)
	q := func(p float64) time.Duration { return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))] }
	res.cacheShare = float64(read) / float64(total)
	res.p50, res.p90, res.p99 = q(0.50), q(0.90), q(0.99)
	return res
}

// TestPrefixRoutingBenchmark measures the placements of the shared-prefix workload on four sims
// whose caches cannot hold every group's prompt: round-robin, p2c, the prefix picker, and
// each group pinned to one replica (the ideal for the cache on a uniform load). It prints the
// table of docs/performance.md; run it with
//
//	go test -run TestPrefixRoutingBenchmark -v .
func TestPrefixRoutingBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of simulated load")
	}
	type row struct {
		name string
		res  sharedPrefixResult
	}
	var rows []row
	for _, load := range []struct {
		name string
		hot  float64
	}{{"uniform", 0}, {"skewed", 0.5}} {
		placements := []struct {
			name, routing string
			pin           bool
		}{
			{"round_robin", "routing: {picker: round_robin}\n", false},
			{"p2c", "routing: {picker: p2c}\n", false},
			{"prefix", "", false}, // the default for this pool
			{"pinned by group", "", true},
		}
		byName := map[string]sharedPrefixResult{}
		for _, pl := range placements {
			res := runSharedPrefix(t, pl.routing, pl.pin, load.hot)
			if res.failures > 0 || res.requests != 480 {
				t.Errorf("%s, %s: %d failures, %d requests logged", load.name, pl.name, res.failures, res.requests)
			}
			byName[pl.name] = res
			rows = append(rows, row{load.name + ", " + pl.name, res})
			t.Logf("%s, %s: decisions %v", load.name, pl.name, res.picks)
		}
		prefix, pinned, p2c, rr := byName["prefix"], byName["pinned by group"], byName["p2c"], byName["round_robin"]
		if load.hot > 0 && placementTimed {
			// The hot group (half the requests) must not pile onto one replica as pinning
			// does, and its spreading must keep the tail below round-robin's.
			busiest := 0
			for _, n := range prefix.perReplica {
				busiest = max(busiest, n)
			}
			if busiest > 480*4/10 || prefix.p90 >= rr.p90 {
				t.Errorf("skewed: prefix picker's busiest replica served %d of 480, TTFT p90 %v (round-robin %v)",
					busiest, prefix.p90, rr.p90)
			}
			continue
		}
		if load.hot > 0 {
			continue
		}
		if prefix.cacheShare < pinned.cacheShare-0.1 && placementTimed {
			t.Errorf("uniform: prefix picker served %.3f from cache, pinning %.3f", prefix.cacheShare, pinned.cacheShare)
		}
		if prefix.cacheShare < p2c.cacheShare+0.2 || placementTimed && prefix.p50 >= p2c.p50 {
			t.Errorf("uniform: prefix picker %.3f from cache, TTFT p50 %v; p2c %.3f, %v",
				prefix.cacheShare, prefix.p50, p2c.cacheShare, p2c.p50)
		}
	}
	var b strings.Builder
	b.WriteString("| load, placement | prompt tokens from cache | TTFT p50 | TTFT p90 | TTFT p99 | requests per replica (a b c d) |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.1f%% | %s | %s | %s | %d %d %d %d |\n", r.name, 100*r.res.cacheShare,
			ms(r.res.p50), ms(r.res.p90), ms(r.res.p99),
			r.res.perReplica["a"], r.res.perReplica["b"], r.res.perReplica["c"], r.res.perReplica["d"])
	}
	t.Log("\n" + b.String())
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}

// TestPrefixPickerDefault leaves routing.picker unset: a model whose pool has more than one
// replica with a prefix cache is placed by the prefix picker (its access log records say
// "pick"); a single replica, or replicas kept out of the index, keep p2c; an explicit picker
// wins everywhere.
func TestPrefixPickerDefault(t *testing.T) {
	const engines = `
engines:
  a: {kind: sim}
  b: {kind: sim}
  c: {kind: sim}
  x: {kind: sim, prefix_cache: {capacity_tokens: -1}}
  y: {kind: sim, prefix_cache: {capacity_tokens: -1}}
models:
  pool: {engines: [a, b]}
  solo: {engines: [c]}
  unindexed: {engines: [x, y]}
`
	picks := func(routing string) map[string]any {
		var access syncBuffer
		_, base := serveGateway(t, parseConfig(t, routing+engines), layer0.WithAccessLog(&access))
		for _, m := range []string{"pool", "solo", "unindexed"} {
			served(t, base, prompt{Model: m, System: strings.Repeat("Shared system prompt. ", 40), Messages: []cacheTurn{{"user", "hi"}}})
		}
		got := map[string]any{}
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			for _, line := range strings.Split(strings.TrimSpace(access.String()), "\n") {
				var r map[string]any
				if json.Unmarshal([]byte(line), &r) == nil {
					got[r["model"].(string)] = r["pick"]
				}
			}
		}
		return got
	}
	if got, want := picks(""), map[string]any{"pool": "load", "solo": nil, "unindexed": nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("picker unset: pick fields %v, want %v", got, want)
	}
	if got, want := picks("routing: {picker: p2c}\n"), map[string]any{"pool": nil, "solo": nil, "unindexed": nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("picker p2c: pick fields %v, want %v", got, want)
	}
	if got, want := picks("routing: {picker: prefix}\n"), map[string]any{"pool": "load", "solo": "load", "unindexed": nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("picker prefix: pick fields %v, want %v", got, want)
	}
}
