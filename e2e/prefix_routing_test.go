package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// sharedPrefixResult is one placement's outcome on the shared-prefix workload.
type sharedPrefixResult struct {
	*bench.SharedPrefixReport
	picks map[string]int // the affinity picker's decisions by reason, from the access log
}

// runSharedPrefix drives the shared-prefix workload of layer0 bench through a fresh gateway on
// examples/prefix-pool.yaml (four sims whose prefix caches hold about three of the eight
// system prompts each; models pin0…pin3 are one replica each): eight groups of four users sharing 1,000-token system prompts, 480 requests
// from 16 concurrent clients, each request a group's system prompt and a question of one of its
// users. skew is the share of requests from group 0 (0: groups drawn evenly). With pin, group g
// goes to model pin(g mod 4) — each group on one replica — else to the pool under routing. TTFT
// is the client's, to the first streamed text; the cache share is the engines' own count.
func runSharedPrefix(t *testing.T, routing string, pin bool, skew float64) sharedPrefixResult {
	pool, err := os.ReadFile("../examples/prefix-pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var access syncbuf.Buffer
	_, base := serveGateway(t, parseConfig(t, routing+string(pool)), layer0.WithAccessLog(&access))
	models := []string{"pool"}
	if pin {
		models = []string{"pin0", "pin1", "pin2", "pin3"}
	}
	rep, err := bench.RunSharedPrefix(context.Background(), bench.SharedPrefixConfig{
		URL: base, Models: models, Groups: 8, UsersPerGroup: 4, PrefixTokens: 1000, Turns: 1, Skew: skew,
		Connections: 16, Requests: 480, MaxTokens: 5, Timeout: time.Minute, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := sharedPrefixResult{SharedPrefixReport: rep, picks: map[string]int{}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := strings.Split(strings.TrimSpace(access.String()), "\n")
		if len(lines) >= int(rep.OK) || time.Now().After(deadline) {
			for _, line := range lines {
				var r struct {
					Pick    string `json:"pick"`
					Skipped string `json:"pick_skipped"`
				}
				if json.Unmarshal([]byte(line), &r) != nil {
					continue
				}
				if r.Pick != "" {
					res.picks[r.Pick]++
				}
				if r.Skipped != "" {
					res.picks["skipped"]++
				}
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return res
}

// TestPrefixRoutingBenchmark measures the placements of the shared-prefix workload on four sims
// whose caches cannot hold every group's prompt: round-robin, p2c, the prefix picker, sticky
// sessions, and each group pinned to one replica (the ideal for the cache on a uniform load),
// and holds the prefix picker to its targets. It prints the table of docs/performance.md; run it
// with
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
	placements := []struct {
		name, routing string
		pin           bool
	}{
		{"round_robin", "routing: {picker: round_robin}\n", false},
		{"p2c", "routing: {picker: p2c}\n", false},
		{"prefix", "", false}, // the default for this pool
		{"sticky", "routing: {picker: sticky}\n", false},
		{"pinned by group", "", true},
	}
	for _, load := range []struct {
		name string
		skew float64
	}{{"uniform", 0}, {"skewed", 0.5}} {
		// measure runs every placement and returns the misses of the timed targets; the
		// others fail the test at once.
		measure := func() (map[string]sharedPrefixResult, []string) {
			byName := map[string]sharedPrefixResult{}
			for _, pl := range placements {
				res := runSharedPrefix(t, pl.routing, pl.pin, load.skew)
				if res.Failed > 0 || res.OK != 480 {
					t.Errorf("%s, %s: %d failures %v, %d served", load.name, pl.name, res.Failed, res.ErrorSamples, res.OK)
				}
				byName[pl.name] = res
				t.Logf("%s, %s: decisions %v", load.name, pl.name, res.picks)
			}
			prefix, pinned, p2c, rr := byName["prefix"], byName["pinned by group"], byName["p2c"], byName["round_robin"]
			var missed []string
			if load.skew > 0 {
				// The hot group (half the requests) must not pile onto one replica as
				// pinning does, and its spreading must keep the tail below both round-robin's
				// and pinning's: the load guard earns its keep.
				busiest := uint64(0)
				for _, n := range prefix.Replicas {
					busiest = max(busiest, n)
				}
				if busiest > 480*4/10 || prefix.TTFT.P90 >= rr.TTFT.P90 || prefix.TTFT.P90 >= pinned.TTFT.P90 {
					missed = append(missed, fmt.Sprintf("skewed: prefix picker's busiest replica served %d of 480, TTFT p90 %v (round-robin %v, pinned %v)",
						busiest, prefix.TTFT.P90, rr.TTFT.P90, pinned.TTFT.P90))
				}
				return byName, missed
			}
			// The cache share is the engines' own count, timing-independent enough to hold
			// under the race detector too: at least 95% of pinning's, far above p2c's.
			if prefix.CacheShare < 0.95*pinned.CacheShare || prefix.CacheShare < p2c.CacheShare+0.2 {
				t.Errorf("uniform: prefix picker served %.3f from cache; pinning %.3f, p2c %.3f",
					prefix.CacheShare, pinned.CacheShare, p2c.CacheShare)
			}
			if float64(prefix.TTFT.P50) > 1.2*float64(pinned.TTFT.P50) || prefix.TTFT.P50 >= p2c.TTFT.P50 {
				missed = append(missed, fmt.Sprintf("uniform: prefix picker's TTFT p50 %v; pinning %v, p2c %v",
					prefix.TTFT.P50, pinned.TTFT.P50, p2c.TTFT.P50))
			}
			return byName, missed
		}
		byName, missed := measure()
		if len(missed) > 0 && placementTimed {
			// The machine is shared: a timed target missed once is measured once more
			// before it fails the test.
			t.Logf("measuring again after %v", missed)
			byName, missed = measure()
		}
		if placementTimed {
			for _, m := range missed {
				t.Error(m)
			}
		}
		for _, pl := range placements {
			rows = append(rows, row{load.name + ", " + pl.name, byName[pl.name]})
		}
	}
	var b strings.Builder
	b.WriteString("| load, placement | prompt tokens from cache | TTFT p50 | TTFT p90 | TTFT p99 | requests per replica (a b c d) |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.1f%% | %s | %s | %s | %d %d %d %d |\n", r.name, 100*r.res.CacheShare,
			ms(r.res.TTFT.P50), ms(r.res.TTFT.P90), ms(r.res.TTFT.P99),
			r.res.Replicas["a"], r.res.Replicas["b"], r.res.Replicas["c"], r.res.Replicas["d"])
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
		var access syncbuf.Buffer
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

// TestPrefixPickerHotSpread: through the gateway, a burst of one system prompt keeps its replica
// over the load guard; with routing.prefix.spread its prefix is spread to a second replica and
// the access log says so (pick hot, pick_spread 2); with max_replicas 1 the guard alone moves
// the overflow (pick spread).
func TestPrefixPickerHotSpread(t *testing.T) {
	const engines = `
engines:
  a: {kind: sim, sim: {ttft: 400ms}}
  b: {kind: sim, sim: {ttft: 400ms}}
  c: {kind: sim, sim: {ttft: 400ms}}
models:
  pool: {engines: [a, b, c]}
`
	system := strings.Repeat("You answer for the hot desk of the shop. ", 200) // about 2,000 tokens
	picks := func(spread string) map[string]int {
		var access syncbuf.Buffer
		_, base := serveGateway(t, parseConfig(t, "routing: {prefix: {spread: "+spread+"}}\n"+engines), layer0.WithAccessLog(&access))
		client := anthropicClient(base)
		ask := func(i int) error {
			_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "pool", MaxTokens: 2,
				System: []anthropic.TextBlockParam{{Text: system}}, Messages: userText("question " + strconv.Itoa(i))})
			return err
		}
		if err := ask(0); err != nil { // the prompt is now on one replica
			t.Fatal(err)
		}
		const burst = 12
		errs := make(chan error, burst)
		for i := range burst {
			go func() { errs <- ask(i + 1) }()
			time.Sleep(5 * time.Millisecond) // in order, each picked while the earlier ones run
		}
		for range burst {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]int{}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			lines := strings.Split(strings.TrimSpace(access.String()), "\n")
			if len(lines) < burst+1 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			for _, line := range lines {
				var r struct {
					Pick   string `json:"pick"`
					Spread int    `json:"pick_spread"`
				}
				if json.Unmarshal([]byte(line), &r) == nil && r.Pick != "" {
					got[r.Pick+"/"+strconv.Itoa(r.Spread)]++
				}
			}
			break
		}
		return got
	}
	on := picks("{window: 1}")
	t.Logf("spreading on: decisions %v", on)
	if on["hot/2"] == 0 {
		t.Errorf("spreading on: decisions %v, want some hot over 2 replicas", on)
	}
	got := picks("{max_replicas: 1}")
	t.Logf("spreading off: decisions %v", got)
	if got["spread/0"] == 0 {
		t.Errorf("spreading off: decisions %v, want the guard's spread", got)
	}
	for k := range got {
		if strings.HasPrefix(k, "hot") {
			t.Errorf("spreading off: decisions %v, want none hot", got)
		}
	}
}
