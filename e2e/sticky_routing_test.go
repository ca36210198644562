package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// stickyPool is four sims behind one model, placed by session.
const stickyPool = `
keys:
  - {name: alice, hash: %s}
  - {name: bob, hash: %s}
engines:
  a: {kind: sim, sim: {ttft: 2ms, prefill_per_token: 5us, inter_token_latency: 1ms, kv_cache_tokens: 8192}}
  b: {kind: sim, sim: {ttft: 2ms, prefill_per_token: 5us, inter_token_latency: 1ms, kv_cache_tokens: 8192}}
  c: {kind: sim, sim: {ttft: 2ms, prefill_per_token: 5us, inter_token_latency: 1ms, kv_cache_tokens: 8192}}
  d: {kind: sim, sim: {ttft: 2ms, prefill_per_token: 5us, inter_token_latency: 1ms, kv_cache_tokens: 8192}}
  slow: {kind: sim, sim: {ttft: 300ms, max_concurrency: 64}}
  slow2: {kind: sim, sim: {ttft: 300ms, max_concurrency: 64}}
models:
  pool: {engines: [%s]}
  hot: {engines: [slow, slow2]}
routing: {picker: sticky}
`

func stickyConfig(t *testing.T, pool string) *layer0.Config {
	return parseConfig(t, fmt.Sprintf(stickyPool, authHash("l0-sticky-alice"), authHash("l0-sticky-bob"), pool))
}

// TestStickyRouting drives routing.picker: sticky through the official SDKs: every turn of a
// conversation named by x-session-id lands on one replica, whose prefix cache then serves the
// conversation so far; sessions spread over the pool; when a replica leaves the pool (a reload)
// only its sessions move; a request without the header keeps to its API key's replica; and a
// session with more requests in flight than the guard allows spills to a second replica.
func TestStickyRouting(t *testing.T) {
	var access syncbuf.Buffer
	g, base := serveGateway(t, stickyConfig(t, "a, b, c, d"), layer0.WithAccessLog(&access))
	ctx := context.Background()
	system := strings.Repeat("You answer questions about the pool's house rules, one rule at a time. ", 20)

	// turn sends one request of session s (a conversation so far of msgs) with alice's key and
	// returns the engine that served it, the usage and the answer.
	turn := func(s string, msgs []anthropic.MessageParam) (string, anthropic.Usage, string) {
		t.Helper()
		var resp *http.Response
		c := anthropicClient(base, option.WithAPIKey("l0-sticky-alice"), option.WithHeader("x-session-id", s),
			option.WithResponseInto(&resp))
		m, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "pool", MaxTokens: 12,
			System: []anthropic.TextBlockParam{{Text: system}}, Messages: msgs})
		if err != nil {
			t.Fatalf("session %s: %v", s, err)
		}
		return resp.Header.Get("X-Layer0-Engine"), m.Usage, m.Content[0].Text
	}

	const sessions, turns = 16, 3
	home := map[string]string{}
	for i := range sessions {
		s := "conversation-" + strconv.Itoa(i)
		var msgs []anthropic.MessageParam
		prev := int64(0)
		for k := range turns {
			msgs = append(msgs, anthropic.NewUserMessage(anthropic.NewTextBlock("Question "+strconv.Itoa(k)+" of "+s+": which rule comes next?")))
			engine, u, text := turn(s, msgs)
			if k == 0 {
				home[s] = engine
			} else if engine != home[s] {
				t.Fatalf("%s: turn %d on %s, turn 0 on %s", s, k, engine, home[s])
			}
			// The replica holds the conversation so far: all of the previous prompt but its
			// last partial block (16 tokens) and the generation prompt that closed it.
			if k > 0 && u.CacheReadInputTokens < prev-32 {
				t.Errorf("%s turn %d: %d tokens from cache, want the previous prompt's %d", s, k, u.CacheReadInputTokens, prev)
			}
			prev = u.InputTokens + u.CacheReadInputTokens
			msgs = append(msgs, anthropic.NewAssistantMessage(anthropic.NewTextBlock(text)))
		}
	}
	per := map[string]int{}
	for _, e := range home {
		per[e]++
	}
	if len(per) < 3 {
		t.Errorf("16 sessions on %d replicas (%v), want them spread", len(per), per)
	}

	// d leaves the pool: its sessions move, every other session stays.
	if err := g.Reload(stickyConfig(t, "a, b, c")); err != nil {
		t.Fatal(err)
	}
	movedTo := map[string]int{}
	for i := range sessions {
		s := "conversation-" + strconv.Itoa(i)
		engine, _, _ := turn(s, userText("Back again."))
		switch was := home[s]; {
		case was != "d" && engine != was:
			t.Errorf("%s moved from %s to %s when d left", s, was, engine)
		case was == "d":
			movedTo[engine]++
		}
	}
	if per["d"] > 0 && len(movedTo) == 0 {
		t.Errorf("d's sessions did not move: %v", movedTo)
	}

	// No header: the API key is the session, in the OpenAI format as well.
	keyHome := map[string]map[string]bool{}
	for _, key := range []string{"l0-sticky-alice", "l0-sticky-bob"} {
		keyHome[key] = map[string]bool{}
		for i := range 6 {
			var resp *http.Response
			c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(key), oaiopt.WithMaxRetries(0), oaiopt.WithResponseInto(&resp))
			if _, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "pool",
				Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Request " + strconv.Itoa(i))}}); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			keyHome[key][resp.Header.Get("X-Layer0-Engine")] = true
		}
		if len(keyHome[key]) != 1 {
			t.Errorf("key %s without a session header served by %v, want one replica", key, keyHome[key])
		}
	}

	// One session, 16 requests at once on a pool of two slow replicas: past 2×0+4 in flight on
	// its replica, the guard spills the session to the other.
	var wg sync.WaitGroup
	engines := make([]string, 16)
	for i := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp *http.Response
			c := anthropicClient(base, option.WithAPIKey("l0-sticky-bob"), option.WithHeader("x-session-id", "hot"),
				option.WithResponseInto(&resp))
			if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "hot", MaxTokens: 2, Messages: userText("hi")}); err != nil {
				t.Errorf("hot session: %v", err)
				return
			}
			engines[i] = resp.Header.Get("X-Layer0-Engine")
		}()
	}
	wg.Wait()
	spilled := map[string]int{}
	for _, e := range engines {
		spilled[e]++
	}
	if len(spilled) != 2 {
		t.Errorf("16 concurrent requests of one session served by %v, want both replicas", spilled)
	}

	// The access log says why: "session" for the session's own replica, "spread" for a spill.
	reasons := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		clear(reasons)
		for _, line := range strings.Split(strings.TrimSpace(access.String()), "\n") {
			var r struct {
				Model string `json:"model"`
				Pick  string `json:"pick"`
			}
			if json.Unmarshal([]byte(line), &r) == nil && r.Model == "hot" {
				reasons[r.Pick]++
			}
		}
		if reasons["session"]+reasons["spread"] == 16 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if reasons["spread"] == 0 || reasons["session"] == 0 || reasons["session"]+reasons["spread"] != 16 {
		t.Errorf("hot session's decisions %v, want session and spread, 16 in all", reasons)
	}
}
