package gateway

// The end-to-end test of precise mode on engines whose token ids are not the gateway's: sims
// with the "bytes" tokenizer (another chat template, one token a byte), served by other
// gateways that also answer vLLM's POST /tokenize, in front of which the gateway keys each
// replica's blocks by the engine's own tokens (prefix_cache.tokenize: engine). In package
// layer0 for the same reason as e2e_prefix_precise_test.go, whose helpers it uses.

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/enginetok"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// serveBytesEngine serves a gateway whose one model, m, is a sim with the bytes tokenizer
// publishing its KV events, and answers POST /tokenize with the sim's tokens as vLLM does. It
// returns the sim's replica and the base URL.
func serveBytesEngine(t *testing.T, kvTokens int) (*replica, string) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
engines:
  s: {kind: sim, sim: {tokenizer: bytes, kv_cache_tokens: %d, kv_events: "tcp://127.0.0.1:0"}}
models:
  m: {engines: [s]}
`, kvTokens)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := g.gen.Load().replicas["s"]
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", s.sim.ServeTokenize)
	mux.Handle("/", g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(mux, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return s, "http://" + ln.Addr().String()
}

// TestPrefixPreciseEngineTokens: two engines that tokenize otherwise than the gateway. With
// tokenize: engine the replicas agree with the engines' events and predict every request's
// cached tokens; a replica of the same engine keyed by the gateway's tokens finds none of its
// prompts in the events, says so once and falls back.
func TestPrefixPreciseEngineTokens(t *testing.T) {
	// Each engine holds about three of the six groups' system prompts (1,400 to 1,700 bytes):
	// blocks are evicted all along.
	s1, base1 := serveBytesEngine(t, 5120)
	s2, base2 := serveBytesEngine(t, 5120)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
routing: {picker: prefix}
engines:
  v1: {kind: openai, url: %q, prefix_cache: {mode: precise, events: %q, tokenize: engine}}
  v2: {kind: openai, url: %q, prefix_cache: {mode: precise, events: %q, tokenize: engine}}
  gw: {kind: openai, url: %[1]q, prefix_cache: {mode: precise, events: %[2]q}}
models:
  pool: {engines: [v1, v2], upstream_model: m}
  p1: {engines: [v1], upstream_model: m}
  p2: {engines: [v2], upstream_model: m}
  g: {engines: [gw], upstream_model: m}
`, base1, s1.sim.KVEventsEndpoint(), base2, s2.sim.KVEventsEndpoint())))
	if err != nil {
		t.Fatal(err)
	}
	var logs, access syncbuf.Buffer
	g, base := servePrecise(t, cfg, Options{AccessLog: &access,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	reps := g.gen.Load().replicas
	pairs := map[string]*replica{"v1": s1, "v2": s2, "gw": s1}
	for name := range pairs {
		waitFor(t, name+"'s subscription", func() bool { return reps[name].events.Status().Connected })
	}
	applied := func() {
		t.Helper()
		for name, s := range pairs {
			waitFor(t, name+"'s events", func() bool {
				st := reps[name].events.Status()
				return st.Connected && st.Next == s.sim.KVEventBatches()
			})
		}
	}
	client := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	send := func(model, system string, msgs []anthropic.MessageParam) placed {
		t.Helper()
		return sendPlaced(t, &client, &access, applied, model, system, msgs)
	}
	for _, m := range []string{"p1", "p2"} {
		r := reps["v"+m[1:]]
		waitFor(t, m+"'s first events", func() bool {
			send(m, "prime "+strings.Repeat("warm up ", 10), userText("hello"))
			return r.events.Status().Next > 0
		})
	}

	rnd := rand.New(rand.NewPCG(7, 3))
	words := strings.Fields("the gateway routes every request to the replica whose cache holds its prompt while " +
		"load stays balanced across engines blocks tokens prefix system user answer question policy refund order")
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
		systems[i] = fmt.Sprintf("%d. You are an assistant. ", i) + text(220+10*i) // the group first: block 0 differs
	}
	const n = 300
	agreed, cached, per := 0, 0, map[string]int{}
	for range n {
		msgs := userText(fmt.Sprintf("user %d asks: ", rnd.IntN(4)) + text(5+rnd.IntN(30)))
		if rnd.IntN(3) == 0 {
			msgs = append([]anthropic.MessageParam{
				anthropic.NewUserMessage(anthropic.NewTextBlock("earlier " + text(20))),
				anthropic.NewAssistantMessage(anthropic.NewTextBlock(text(15))),
			}, msgs...)
		}
		p := send("pool", systems[rnd.IntN(groups)], msgs)
		per[p.Engine]++
		cached += p.CacheRead
		if agrees(p) {
			agreed++
		} else {
			t.Logf("%s: predicted %d, the engine served %d of %d from its cache", p.Engine, *p.Predicted, p.CacheRead, p.Input+p.CacheRead)
		}
	}
	t.Logf("%d of %d predictions equal the engine's cached tokens; %d tokens from cache; requests per replica %v", agreed, n, cached, per)
	if agreed != n || cached == 0 {
		t.Errorf("%d of %d predictions agree (want all), %d tokens served from cache", agreed, n, cached)
	}
	// Every answer's prediction was checked against the engine's report, and was exact.
	body := metricsText(t, base)
	for _, name := range []string{"v1", "v2"} {
		if want := fmt.Sprintf(`layer0_engine_prefix_prediction_agreement{engine=%q} 1`, name); !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
		exact := sample(body, fmt.Sprintf(`layer0_prefix_prediction_error_tokens_bucket{engine=%q,le="0"}`, name))
		all := sample(body, fmt.Sprintf(`layer0_prefix_prediction_error_tokens_count{engine=%q}`, name))
		// Checked from the engine's first report of cached tokens on: all but the first few.
		if exact != all || all < float64(per[name])-8 {
			t.Errorf("%s: %v of %v checked predictions exact, want all, of about %d", name, exact, all, per[name])
		}
	}
	for _, name := range []string{"v1", "v2"} {
		st := reps[name].prefix.PreciseStats()
		if per[name] == 0 || st.Stored == 0 || st.Removed == 0 {
			t.Errorf("%s: %d requests, %+v: want requests, blocks stored and removed", name, per[name], st)
		}
		if m, why := reps[name].prefix.Mode(); m != "precise" {
			t.Errorf("%s: mode %s (%s)", name, m, why)
		}
	}
	if tk, ok := reps["v1"].prefix.Renderer().(*enginetok.Tokenizer); !ok {
		t.Errorf("v1 renders with %T, want the engine's tokenizer", reps["v1"].prefix.Renderer())
	} else {
		st := tk.Stats()
		t.Logf("v1's tokenizer: %+v", st)
		if st.Misses == 0 || st.Failures != 0 {
			t.Errorf("v1's tokenizer: %+v", st)
		}
	}

	// The same engine keyed by the gateway's tokens: none of its prompts shows up in the
	// events; once the check has seen enough of them, it falls back.
	for i := range 20 {
		send("g", systems[i%groups], userText(fmt.Sprintf("question %d", i)))
	}
	waitFor(t, "gw's verdict", func() bool {
		send("g", systems[0], userText("one more"))
		m, _ := reps["gw"].prefix.Mode()
		return m == "approximate"
	})
	// Whichever check decides first: the first blocks missing from the events, or the
	// predictions' drift.
	if _, why := reps["gw"].prefix.Mode(); !strings.Contains(why, "does not tokenize them as the engine does") &&
		!strings.Contains(why, "predictions drift") {
		t.Errorf("gw: fallen back because %q", why)
	}
	body = metricsText(t, base)
	for _, want := range []string{`layer0_engine_prefix_precise{engine="v1"} 1`, `layer0_engine_prefix_precise{engine="v2"} 1`,
		`layer0_engine_prefix_precise{engine="gw"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if got := strings.Count(logs.String(), "falling back to approximate mode"); got != 1 {
		t.Errorf("%d fallback warnings, want 1:\n%s", got, logs.String())
	}
}

// sample returns the value of the sample line of /metrics text that starts with series; -1 when
// there is none.
func sample(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
