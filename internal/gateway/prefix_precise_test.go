package gateway

// The end-to-end test of the prefix index's precise mode. It is an internal test, to reach the
// embedded engines (to restart one) and the replicas' subscriptions (to wait until every event
// published has been applied before the next request is placed).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// preciseConfig: two sims whose caches hold 64 blocks of 16 tokens — about three of the six
// groups' system prompts each, so blocks are evicted all along — publishing their KV events
// on free loopback ports, and the prefix picker on every model (pa and pb are one replica
// each, for the steps that need a given replica).
const preciseConfig = `
routing: {picker: prefix}
engines:
  a: {kind: sim, sim: {kv_cache_tokens: 1024, kv_events: "tcp://127.0.0.1:0"}, prefix_cache: {mode: precise}}
  b: {kind: sim, sim: {kv_cache_tokens: 1024, kv_events: "tcp://127.0.0.1:0"}, prefix_cache: {mode: precise}}
models:
  pool: {engines: [a, b]}
  pa: {engines: [a]}
  pb: {engines: [b]}
`

// waitFor polls cond every 5 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// placed is what the access log says of one request.
type placed struct {
	Engine    string `json:"engine"`
	Predicted *int   `json:"pick_cached_tokens"`
	Input     int    `json:"input_tokens"`
	CacheRead int    `json:"cache_read_input_tokens"`
}

func TestPrefixPreciseEndToEnd(t *testing.T) {
	cfg, err := config.Parse([]byte(preciseConfig))
	if err != nil {
		t.Fatal(err)
	}
	var access syncbuf.Buffer
	g, base := servePrecise(t, cfg, Options{AccessLog: &access})
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("test-key"), option.WithMaxRetries(0))

	reps := g.gen.Load().replicas
	names := []string{"a", "b"}
	for _, n := range names {
		r := reps[n]
		if r.sim == nil || r.events == nil || r.prefix == nil {
			t.Fatalf("replica %s: sim %v, events %v, prefix %v", n, r.sim != nil, r.events != nil, r.prefix != nil)
		}
		waitFor(t, n+"'s subscription", func() bool { return r.events.Status().Connected })
	}
	// applied waits until every batch each engine published has been applied to its index.
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

	rnd := rand.New(rand.NewPCG(12, 2))
	words := strings.Fields("the gateway routes every request to the replica whose cache holds its prompt while " +
		"load stays balanced across engines blocks tokens prefix system user answer question policy refund order " +
		"shipping invoice account password network router firmware battery screen keyboard warranty")
	text := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rnd.IntN(len(words))])
		}
		return b.String()
	}
	const groups = 6
	systems := make([]string, groups)
	for i := range systems {
		systems[i] = fmt.Sprintf("You are assistant %d. ", i) + text(220+10*i)
	}
	send := func(model string, system string, msgs []anthropic.MessageParam) placed {
		t.Helper()
		return sendPlaced(t, &client, &access, applied, model, system, msgs)
	}

	// Prime: a publisher drops what it publishes before a subscription reaches it, so each
	// engine serves throwaway prompts until its events arrive.
	for _, m := range []string{"pa", "pb"} {
		r := reps[m[1:]]
		waitFor(t, m+"'s first events", func() bool {
			send(m, "prime "+text(40), userText("hello"))
			return r.events.Status().Next > 0
		})
	}

	// workload sends n requests of shared-prefix traffic to the pool: a group's system prompt
	// and a user's question, a third of them with an earlier turn of the conversation.
	workload := func(n int) (agreed int, perReplica map[string]int) {
		perReplica = map[string]int{}
		for range n {
			g := rnd.IntN(groups)
			msgs := userText(fmt.Sprintf("user %d asks: ", rnd.IntN(4)) + text(5+rnd.IntN(30)))
			if rnd.IntN(3) == 0 {
				msgs = append([]anthropic.MessageParam{
					anthropic.NewUserMessage(anthropic.NewTextBlock("earlier " + text(20))),
					anthropic.NewAssistantMessage(anthropic.NewTextBlock(text(15))),
				}, msgs...)
			}
			p := send("pool", systems[g], msgs)
			perReplica[p.Engine]++
			if agrees(p) {
				agreed++
			} else {
				t.Logf("%s: predicted %d, engine served %d of %d from its cache", p.Engine, *p.Predicted, p.CacheRead, p.Input+p.CacheRead)
			}
		}
		return agreed, perReplica
	}

	const n = 300
	agreed, per := workload(n)
	t.Logf("%d of %d predictions equal the engine's cached tokens; requests per replica %v", agreed, n, per)
	if agreed*100 < 99*n {
		t.Errorf("%d of %d predictions agree, want at least 99%%", agreed, n)
	}
	for _, name := range names {
		st := reps[name].prefix.PreciseStats()
		t.Logf("%s: %+v", name, st)
		if per[name] == 0 || st.Removed == 0 || st.Stored == 0 {
			t.Errorf("%s: %d requests, %d blocks stored and %d removed by events: want all positive", name, per[name], st.Stored, st.Removed)
		}
		if m, why := reps[name].prefix.Mode(); m != "precise" {
			t.Errorf("%s: mode %s (%s)", name, m, why)
		}
	}

	// AllBlocksCleared: the engine empties its cache; the index follows, where the approximate
	// estimate would still expect the group's prompt there.
	a := reps["a"]
	send("pa", systems[0], userText("warm"))
	if p := send("pa", systems[0], userText("warm")); *p.Predicted == 0 || !agrees(p) {
		t.Fatalf("before the reset: %+v, predicted %d", p, *p.Predicted)
	}
	a.sim.ResetCache()
	applied()
	if st := a.prefix.PreciseStats(); st.Blocks != 0 {
		t.Fatalf("after AllBlocksCleared: %d blocks indexed", st.Blocks)
	}
	if p := send("pa", systems[0], userText("warm")); *p.Predicted != 0 || p.CacheRead != 0 {
		t.Fatalf("after the reset: predicted %d, the engine served %d from its cache", *p.Predicted, p.CacheRead)
	}

	// The engine restarts: its cache is lost and its publisher comes back on the same port,
	// counting from 0. The subscription reconnects and starts the index anew.
	send("pa", systems[1], userText("warm"))
	if a.prefix.PreciseStats().Blocks == 0 {
		t.Fatal("nothing indexed before the restart")
	}
	connects := a.events.Status().Connects
	if err := a.sim.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reconnection", func() bool { st := a.events.Status(); return st.Connects > connects && st.Connected })
	if st := a.prefix.PreciseStats(); st.Blocks != 0 {
		t.Fatalf("after the reconnection: %d blocks indexed", st.Blocks)
	}
	// The new subscription may miss the first batches of the restarted publisher: prime again.
	waitFor(t, "a's events after the restart", func() bool {
		send("pa", "prime again "+text(40), userText("hello"))
		return a.events.Status().Next > 0
	})
	const m = 100
	agreed, per = workload(m)
	t.Logf("after the restart: %d of %d predictions agree; requests per replica %v", agreed, m, per)
	if agreed*100 < 99*m || per["a"] == 0 {
		t.Errorf("after the restart: %d of %d predictions agree (want at least 99%%), %d on a", agreed, m, per["a"])
	}

	// Each replica shows precise mode again. The subscription can drop and come back once more
	// on a loaded machine (the restarted publisher's first connection), so the gauge is read
	// until it shows 1, for as long as waitFor allows.
	for _, name := range names {
		want := fmt.Sprintf("layer0_engine_prefix_precise{engine=%q} 1", name)
		waitFor(t, "/metrics to show "+want, func() bool { return strings.Contains(metricsText(t, base), want) })
	}
}

// servePrecise serves cfg on a loopback listener and returns the gateway and its base URL.
func servePrecise(t *testing.T, cfg *config.Config, o Options) (*Gateway, string) {
	t.Helper()
	g, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return g, "http://" + ln.Addr().String()
}

// sendPlaced sends one request with the SDK, waits until the engines' events are applied
// (applied) and returns the request's access log record.
func sendPlaced(t *testing.T, client *anthropic.Client, access *syncbuf.Buffer, applied func(), model, system string,
	msgs []anthropic.MessageParam) placed {
	t.Helper()
	count := func() int {
		l := access.Lines()
		if len(l) == 1 && l[0] == "" {
			return 0
		}
		return len(l)
	}
	before := count()
	msg, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: anthropic.Model(model),
		MaxTokens: 8, System: []anthropic.TextBlockParam{{Text: system}}, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	applied()
	waitFor(t, "the access log record", func() bool { return count() > before })
	lines := access.Lines()
	var p placed
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &p); err != nil {
		t.Fatalf("%v: %s", err, lines[len(lines)-1])
	}
	if p.Predicted == nil {
		t.Fatalf("no pick_cached_tokens in %s", lines[len(lines)-1])
	}
	if int64(p.CacheRead) != msg.Usage.CacheReadInputTokens {
		t.Fatalf("access log cache_read_input_tokens %d, the SDK's %d", p.CacheRead, msg.Usage.CacheReadInputTokens)
	}
	return p
}

// agrees reports whether the index predicted what the engine then served from its cache. The
// engine computes the last prompt token whatever it holds, as vLLM does.
func agrees(p placed) bool {
	n := p.Input + p.CacheRead
	return min(*p.Predicted, n-1) == p.CacheRead
}

// metricsText returns the gateway's /metrics.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func userText(s string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(s))}
}

// TestPrefixPreciseOpenAIEngine: precise mode as for a vLLM pool — openai engines given by
// their URL and event endpoint (here another gateway serving a sim that publishes its events).
// The replica configured with the engine's block size follows the events and predicts what
// the engine serves from its cache; one configured with another block size says so once and
// falls back to the approximate estimate.
func TestPrefixPreciseOpenAIEngine(t *testing.T) {
	backCfg, err := config.Parse([]byte(`
engines:
  s: {kind: sim, sim: {kv_cache_tokens: 4096, kv_events: "tcp://127.0.0.1:0"}}
models:
  m: {engines: [s]}
`))
	if err != nil {
		t.Fatal(err)
	}
	back, backBase := servePrecise(t, backCfg, Options{})
	s := back.gen.Load().replicas["s"].sim

	frontCfg, err := config.Parse([]byte(fmt.Sprintf(`
routing: {picker: prefix}
engines:
  v16: {kind: openai, url: %[1]q, prefix_cache: {mode: precise, events: %[2]q}}
  v32: {kind: openai, url: %[1]q, prefix_cache: {mode: precise, events: %[2]q, block_tokens: 32}}
models:
  m16: {engines: [v16], upstream_model: m}
  m32: {engines: [v32], upstream_model: m}
`, backBase, s.KVEventsEndpoint())))
	if err != nil {
		t.Fatal(err)
	}
	var logs, access syncbuf.Buffer
	front, base := servePrecise(t, frontCfg, Options{AccessLog: &access,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	reps := front.gen.Load().replicas
	v16, v32 := reps["v16"], reps["v32"]
	for _, r := range []*replica{v16, v32} {
		waitFor(t, "the subscriptions", func() bool { return r.events.Status().Connected })
	}
	applied := func() {
		waitFor(t, "the events", func() bool {
			n := s.KVEventBatches()
			return v16.events.Status().Next == n && v32.events.Status().Next == n
		})
	}
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	send := func(model, system, user string) placed {
		t.Helper()
		return sendPlaced(t, &client, &access, applied, model, system, userText(user))
	}
	waitFor(t, "the first events", func() bool {
		send("m16", "prime "+strings.Repeat("warm the cache up ", 10), "hello")
		return v16.events.Status().Next > 0 && v32.events.Status().Next > 0
	})
	systems := []string{
		strings.Repeat("You answer questions about the shop's routers and their firmware. ", 12),
		strings.Repeat("You help customers return a parcel and get a refund for it. ", 15),
	}
	agreed, cached := 0, 0
	const n = 20
	for i := range n {
		p := send("m16", systems[i%2], fmt.Sprintf("question %d about it", i))
		if agrees(p) {
			agreed++
		} else {
			t.Logf("v16: predicted %d, the engine served %d of %d from its cache", *p.Predicted, p.CacheRead, p.Input+p.CacheRead)
		}
		cached += p.CacheRead
	}
	if agreed != n || cached == 0 {
		t.Errorf("v16: %d of %d predictions agree, %d tokens served from cache", agreed, n, cached)
	}
	if m, why := v16.prefix.Mode(); m != "precise" {
		t.Errorf("v16: mode %s (%s)", m, why)
	}
	m, why := v32.prefix.Mode()
	if m != "approximate" || !strings.Contains(why, "block size is 16 tokens, the index's 32") {
		t.Errorf("v32: mode %s (%s)", m, why)
	}
	if got := strings.Count(logs.String(), "falling back to approximate mode"); got != 1 {
		t.Errorf("%d fallback warnings, want 1:\n%s", got, logs.String())
	}
	body := metricsText(t, base)
	for _, want := range []string{`layer0_engine_prefix_precise{engine="v16"} 1`, `layer0_engine_prefix_precise{engine="v32"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
