package gateway

// The end-to-end test of llm-d's topology: engines that connect to the gateway's bound event
// endpoint, and a gap in one's events repaired from its replay endpoint. In package layer0 for
// the same reason as e2e_prefix_precise_test.go, whose helpers it uses.

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPrefixPreciseBound: two sims connect to one endpoint the gateway binds, each under its
// own topic, and each replica follows its own engine's events exactly. Batches one engine loses
// on the way are replayed from its replay endpoint: the index keeps what it held and still
// predicts every request.
func TestPrefixPreciseBound(t *testing.T) {
	ev, ra, rb := freePort(t), freePort(t), freePort(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
routing: {picker: prefix}
engines:
  a: {kind: sim, sim: {kv_cache_tokens: 1024, kv_events: "tcp://127.0.0.1:%[1]d", kv_events_connect: true,
      kv_events_topic: "kv@10.0.0.5:8000@m", kv_replay: "tcp://127.0.0.1:%[2]d"},
      prefix_cache: {mode: precise, events: "tcp://*:%[1]d", events_topic: "kv@10.0.0.5:8000@", replay: "tcp://127.0.0.1:%[2]d"}}
  b: {kind: sim, sim: {kv_cache_tokens: 1024, kv_events: "tcp://127.0.0.1:%[1]d", kv_events_connect: true,
      kv_events_topic: "kv@10.0.0.6:8000@m", kv_replay: "tcp://127.0.0.1:%[3]d"},
      prefix_cache: {mode: precise, events: "tcp://*:%[1]d", events_topic: "kv@10.0.0.6:8000@", replay: "tcp://127.0.0.1:%[3]d"}}
models:
  pool: {engines: [a, b]}
  pa: {engines: [a]}
  pb: {engines: [b]}
`, ev, ra, rb)))
	if err != nil {
		t.Fatal(err)
	}
	var access syncbuf.Buffer
	g, base := servePrecise(t, cfg, Options{AccessLog: &access})
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	reps := g.gen.Load().replicas
	names := []string{"a", "b"}
	applied := func() {
		t.Helper()
		for _, n := range names {
			r := reps[n]
			waitFor(t, n+"'s events", func() bool {
				st := r.events.Status()
				return st.Connected && st.Next == r.sim.KVEventBatches()
			})
		}
	}
	send := func(model, system, user string) placed {
		t.Helper()
		return sendPlaced(t, &client, &access, applied, model, system, userText(user))
	}
	prime := 0
	for _, m := range []string{"pa", "pb"} {
		r := reps[m[1:]]
		waitFor(t, m+"'s first events", func() bool {
			prime++ // a new prompt each time: one cached already publishes nothing
			if _, err := client.Messages.New(t.Context(), anthropic.MessageNewParams{Model: anthropic.Model(m), MaxTokens: 4,
				Messages: userText(fmt.Sprintf("prime %d ", prime) + strings.Repeat(" warm the cache up", 10))}); err != nil {
				t.Fatal(err)
			}
			return r.events.Status().Connected
		})
	}
	applied()
	systems := make([]string, 4)
	for i := range systems {
		systems[i] = fmt.Sprintf("%d. ", i) + strings.Repeat(fmt.Sprintf("You serve group %d of the shop's customers. ", i), 12)
	}
	agreed, per := 0, map[string]int{}
	const n = 60
	for i := range n {
		if i == n/2 {
			// a loses three batches on the way; its subscription finds the gap at the next one.
			// The batch after them reveals the gap, which is replayed before it is applied.
			reps["a"].sim.DropKVEvents(3)
			for k := range 4 {
				if _, err := client.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "pa", MaxTokens: 4,
					System: []anthropic.TextBlockParam{{Text: systems[k]}}, Messages: userText("lost " + fmt.Sprint(k))}); err != nil {
					t.Fatal(err)
				}
			}
			applied()
		}
		p := send("pool", systems[i%len(systems)], fmt.Sprintf("question %d", i))
		per[p.Engine]++
		if agrees(p) {
			agreed++
		} else {
			t.Logf("%s: predicted %d, the engine served %d of %d", p.Engine, *p.Predicted, p.CacheRead, p.Input+p.CacheRead)
		}
	}
	st := reps["a"].events.Status()
	t.Logf("%d of %d predictions agree; per replica %v; a's subscription %+v", agreed, n, per, st)
	if agreed != n || per["a"] == 0 || per["b"] == 0 {
		t.Errorf("%d of %d predictions agree, per replica %v", agreed, n, per)
	}
	if st.Replays != 1 || st.ReplayFailures != 0 || st.Connects != 1 {
		t.Errorf("a's subscription: %+v, want one gap replayed on one connection", st)
	}
	for _, name := range names {
		if m, why := reps[name].prefix.Mode(); m != "precise" {
			t.Errorf("%s: mode %s (%s)", name, m, why)
		}
	}
}
