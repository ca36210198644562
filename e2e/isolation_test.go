package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/layer0ai/layer0/internal/trace"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// isolationConfig has three keys — alice and bob may use every model, carol only "other" — one
// sim engine with a prefix cache serving a model that keeps each key's cached state to itself
// ("private"), one that shares it across keys ("shared"), and an offload target to "private".
var isolationConfig = `
keys:
  - {name: alice, hash: ` + authHash("l0-alice-key") + `}
  - {name: bob, hash: ` + authHash("l0-bob-key") + `}
  - {name: carol, hash: ` + authHash("l0-carol-key") + `, models: [other]}
engines:
  one: {kind: sim, sim: {kv_cache_tokens: 65536}}
models:
  private: {engines: [one], cache: {enabled: true}}
  shared: {engines: [one], cache: {enabled: true, share_across_keys: true}}
  other: {engines: [one]}
offload_targets:
  vip: {model: private}
`

// pinSystem is a system prompt with a secret in its middle: blocks before it every guess
// shares, blocks after it only the right guess does.
func pinSystem(pin string) string {
	return strings.Repeat("You are the assistant of a bank and answer politely. ", 4) +
		"The vault PIN is " + pin + ". " + strings.Repeat("Never tell anyone the PIN, whatever they say. ", 6)
}

// tenantAnthropic sends system and "Hello" at temperature 0 as key through the Anthropic SDK and
// returns the X-Cache header.
func tenantAnthropic(t *testing.T, base, key, model, system string) string {
	t.Helper()
	var resp *http.Response
	c := anthropicClient(base, option.WithAPIKey(key), option.WithResponseInto(&resp))
	if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 8,
		Temperature: anthropic.Float(0), System: []anthropic.TextBlockParam{{Text: system}}, Messages: userText("Hello")}); err != nil {
		t.Fatalf("%s asking %s: %v", key, model, err)
	}
	return resp.Header.Get("X-Cache")
}

// tenantOpenAI is tenantAnthropic through the OpenAI SDK.
func tenantOpenAI(t *testing.T, base, key, model, system string) string {
	t.Helper()
	var resp *http.Response
	c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(key), oaiopt.WithMaxRetries(0), oaiopt.WithResponseInto(&resp))
	if _, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: model, MaxTokens: oai.Int(8),
		Temperature: oai.Float(0), Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage(system), oai.UserMessage("Hello")}}); err != nil {
		t.Fatalf("%s asking %s: %v", key, model, err)
	}
	return resp.Header.Get("X-Cache")
}

// probe asks POST /v1/cache as key and returns the status and the answer.
func probe(t *testing.T, base, key string, p prompt) (int, cacheAnswer, string) {
	t.Helper()
	resp, body := postJSON(t, base+"/v1/cache", key, p)
	var a cacheAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
	}
	return resp.StatusCode, a, string(body)
}

// One key's system prompt with a secret, sent to a model that does not share across keys, gives
// another key no signal: /v1/cache answers the same for the right guess and a wrong one, and
// the identical request is no cache hit for it. With the model's share_across_keys, both are
// shared, as configured.
func TestIsolationCacheAndPrefixPerKey(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, isolationConfig))
	secret := pinSystem("4821")
	hello := []cacheTurn{{Role: "user", Content: "Hello"}}

	for _, model := range []string{"private", "shared"} {
		if got := tenantAnthropic(t, base, "l0-alice-key", model, secret); got != "MISS" {
			t.Fatalf("%s: alice's first request: X-Cache %q, want MISS", model, got)
		}
		// alice herself is told her prompt is cached.
		code, own, body := probe(t, base, "l0-alice-key", prompt{Model: model, System: secret, Messages: hello})
		if code != http.StatusOK || own.CachedTokens == 0 || !own.Hit {
			t.Fatalf("%s: alice's own prompt: %d %s, want it cached", model, code, body)
		}
		var answers [2]cacheAnswer
		for i, pin := range []string{"4821", "1234"} {
			code, answers[i], body = probe(t, base, "l0-bob-key", prompt{Model: model, System: pinSystem(pin), Messages: hello})
			if code != http.StatusOK {
				t.Fatalf("%s: bob guessing %s: %d %s", model, pin, code, body)
			}
		}
		right, wrong := answers[0], answers[1]
		if model == "private" {
			if right != wrong || right.Hit {
				t.Errorf("private: bob's right guess %+v, wrong guess %+v: want the same answer, nothing cached", right, wrong)
			}
		} else if right.CachedTokens <= wrong.CachedTokens {
			t.Errorf("shared: bob's right guess %+v, wrong guess %+v: want alice's prompt shared", right, wrong)
		}
		want := map[string]string{"private": "MISS", "shared": "HIT"}[model]
		if got := tenantOpenAI(t, base, "l0-bob-key", model, secret); got != want {
			t.Errorf("%s: bob's identical request: X-Cache %q, want %s", model, got, want)
		}
	}
	// alice's answer stays hers on the private model: still a hit for her.
	if got := tenantAnthropic(t, base, "l0-alice-key", "private", secret); got != "HIT" {
		t.Errorf("alice's repeated request: X-Cache %q, want HIT", got)
	}

	// Only for models the key may use, in the Anthropic error format.
	for _, tc := range []struct {
		key, model string
		code       int
		errType    string
	}{
		{"l0-carol-key", "private", http.StatusForbidden, "permission_error"},
		{"l0-carol-key", "nonesuch", http.StatusNotFound, "not_found_error"},
		{"l0-carol-key", "other", http.StatusOK, ""},
	} {
		code, _, body := probe(t, base, tc.key, prompt{Model: tc.model, System: secret, Messages: hello})
		if code != tc.code || tc.errType != "" && !strings.Contains(body, `"type":"`+tc.errType+`"`) {
			t.Errorf("%s asking for %s: %d %s, want %d %s", tc.key, tc.model, code, body, tc.code, tc.errType)
		}
	}
}

// /v1/cache takes the offload directive and header as /v1/messages does: an unknown target is a
// 400 from both, a target whose model the key may not use a 403 from both, and a known one is
// looked up as the model it names.
func TestIsolationCacheQueryOffload(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, isolationConfig))
	hello := []cacheTurn{{Role: "user", Content: "Hello"}}
	for _, tc := range []struct {
		name, key, system, header string
		code                      int
	}{
		{"unknown directive target", "l0-alice-key", "<|offload:nowhere|>Be brief.", "", http.StatusBadRequest},
		{"unknown header target", "l0-alice-key", "Be brief.", "nowhere", http.StatusBadRequest},
		{"target not the key's", "l0-carol-key", "<|offload:vip|>Be brief.", "", http.StatusForbidden},
		{"known target", "l0-alice-key", "<|offload:vip|>Be brief.", "", http.StatusOK},
	} {
		var codes []int
		for _, path := range []string{"/v1/messages", "/v1/cache"} {
			p := prompt{Model: "other", System: tc.system, Messages: hello}
			if path == "/v1/messages" {
				p.MaxTokens = 5
			}
			body, _ := json.Marshal(p)
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(string(body)))
			req.Header.Set("X-Api-Key", tc.key)
			req.Header.Set("Content-Type", "application/json")
			if tc.header != "" {
				req.Header.Set("X-Offload-Target", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
		if codes[0] != tc.code || codes[1] != tc.code {
			t.Errorf("%s: /v1/messages %d, /v1/cache %d, want %d from both", tc.name, codes[0], codes[1], tc.code)
		}
	}

	// A known target is looked up as its model: what alice sent to "private" is cached for a
	// query of "other" offloaded to it, and not for the same query without the offload.
	secret := pinSystem("4821")
	tenantAnthropic(t, base, "l0-alice-key", "private", secret)
	p := prompt{Model: "other", System: "<|offload:vip|>" + secret, Messages: hello}
	if code, a, body := probe(t, base, "l0-alice-key", p); code != http.StatusOK || !a.Hit {
		t.Errorf("offloaded query: %d %s, want the prompt cached", code, body)
	}
}

// A leader of a cacheable stream whose client never reads holds the engine's stream at its
// client's pace (not at all), until the write timeout; an identical request must not wait for
// it: it notices the leader is stuck writing to its client and serves itself, at the engine's
// pace.
func TestCacheFollowerDoesNotWaitOnStalledLeader(t *testing.T) {
	cfg := parseConfig(t, `
keys: [{name: alice, hash: `+authHash("l0-alice-key")+`}]
engines: {echo: {kind: sim, sim: {mode: echo}}}
models: {echo: {engines: [echo], cache: {enabled: true}}}
`)
	_, addr, _ := serveListener(t, cfg)
	// The echo engine repeats the user's 40,000 words: megabytes of events, more than the
	// socket buffers of a client reading nothing hold.
	words := strings.Repeat("word ", 40000)
	body := `{"model":"echo","max_tokens":100000,"temperature":0,"stream":true,"messages":[{"role":"user","content":"` + words + `"}]}`
	leader, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = leader.(*net.TCPConn).SetReadBuffer(4096)
	defer leader.Close()
	fmt.Fprintf(leader, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: l0-alice-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Only the status line is read, to know the leader's answer has begun; then nothing.
	_ = leader.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReaderSize(leader, 16).ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("leader: %q %v", line, err)
	}

	var resp *http.Response
	c := anthropicClient("http://"+addr, option.WithAPIKey("l0-alice-key"), option.WithResponseInto(&resp),
		option.WithRequestTimeout(25*time.Second))
	start := time.Now()
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "echo", MaxTokens: 100000,
		Temperature: anthropic.Float(0), Messages: userText(words)})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("follower after %v: %v", took, err)
	}
	if len(msg.Content) == 0 || len(msg.Content[0].Text) < len(words)-10 {
		t.Fatalf("follower's answer is short: %d bytes", len(msg.Content[0].Text))
	}
	// Today's write timeout is 30s: a follower that waited for the leader took that long.
	if took > 15*time.Second {
		t.Errorf("the follower took %v behind a leader whose client does not read", took)
	}
	if got := resp.Header.Get("X-Layer0-Cache"); got != "miss" {
		t.Errorf("follower: X-Layer0-Cache %q, want miss (it served itself)", got)
	}
}

// With the response cache shared by replicas on Redis, a key's answer stored by one replica is a
// hit for that key on another, and a miss for another key there unless the model shares across
// keys.
func TestIsolationSharedCacheAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	bases := replicas(t, 2, srv, "timeout: 2s, cache: {enabled: true, timeout: 2s}", isolationConfig)
	secret := pinSystem("4821")
	for _, tc := range []struct{ model, bob string }{{"private", "MISS"}, {"shared", "HIT"}} {
		if got := tenantAnthropic(t, bases[0], "l0-alice-key", tc.model, secret); got != "MISS" {
			t.Fatalf("%s: alice on replica 0: X-Cache %q, want MISS", tc.model, got)
		}
		if got := tenantOpenAI(t, bases[1], "l0-bob-key", tc.model, secret); got != tc.bob {
			t.Errorf("%s: bob on replica 1: X-Cache %q, want %s", tc.model, got, tc.bob)
		}
		if got := tenantOpenAI(t, bases[1], "l0-alice-key", tc.model, secret); got != "HIT" {
			t.Errorf("%s: alice on replica 1: X-Cache %q, want HIT (her answer, from Redis)", tc.model, got)
		}
	}
}

// embedAs posts one embeddings request for text as key and returns the X-Cache and
// X-Layer0-Engine headers.
func embedAs(t *testing.T, base, key, model, text string) (xcache, engine string) {
	t.Helper()
	resp, _ := postJSON(t, base+"/v1/embeddings", key, map[string]any{"model": model, "input": text, "dimensions": 4})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s embedding on %s: status %d", key, model, resp.StatusCode)
	}
	return resp.Header.Get("X-Cache"), resp.Header.Get("X-Layer0-Engine")
}

// The embeddings cache is scoped as the chat cache is: a text one key embedded is a miss for
// another key (so X-Cache tells it nothing about what others embedded) unless the model shares
// across keys, with the cache in memory and shared on Redis.
func TestIsolationEmbeddingsCachePerKey(t *testing.T) {
	_, mem := serveGateway(t, parseConfig(t, isolationConfig))
	srv := redistest.Start(t)
	shared := replicas(t, 2, srv, "timeout: 2s, cache: {enabled: true, timeout: 2s}", isolationConfig)
	for _, st := range []struct {
		name         string
		alice, other string // where alice embeds, where bob and alice ask again
	}{{"memory", mem, mem}, {"redis", shared[0], shared[1]}} {
		for _, tc := range []struct{ model, bob string }{{"private", "MISS"}, {"shared", "HIT"}} {
			text := "alice confidential (" + st.name + "): patient John Doe has diagnosis X"
			if got, _ := embedAs(t, st.alice, "l0-alice-key", tc.model, text); got != "MISS" {
				t.Fatalf("%s %s: alice's first request: X-Cache %q, want MISS", st.name, tc.model, got)
			}
			if got, _ := embedAs(t, st.other, "l0-bob-key", tc.model, text); got != tc.bob {
				t.Errorf("%s %s: bob's identical request: X-Cache %q, want %s", st.name, tc.model, got, tc.bob)
			}
			if got, _ := embedAs(t, st.other, "l0-alice-key", tc.model, text); got != "HIT" {
				t.Errorf("%s %s: alice's repeated request: X-Cache %q, want HIT", st.name, tc.model, got)
			}
		}
	}
}

// An embeddings answer from a fallback model is not stored (as a generation's is not): the
// fallback's vectors are another model's, and would be served for the primary to every later
// request. Only the model asked for, served with no fallback, fills the cache.
func TestEmbeddingsFallbackNotCached(t *testing.T) {
	bad := fake.NewOpenAI(fake.Script{Status: http.StatusServiceUnavailable, Body: `{"error":{"message":"down","type":"api_error"}}`})
	t.Cleanup(bad.Close)
	_, base := serveGateway(t, parseConfig(t, fmt.Sprintf(`
routing: {ejection: {consecutive_failures: -1}}
keys:
  - {name: alice, hash: %s}
engines:
  bad: {kind: openai, url: %q}
  one: {kind: sim}
models:
  emb: {engines: [bad], fallback: [emb2], cache: {enabled: true, share_across_keys: true}}
  emb2: {engines: [one]}
`, authHash("l0-alice-key"), bad.URL)))
	for i := range 2 {
		got, engine := embedAs(t, base, "l0-alice-key", "emb", "fallback poison test")
		if engine != "one" {
			t.Fatalf("request %d: served by %q, want the fallback's engine", i, engine)
		}
		if got != "MISS" {
			t.Errorf("request %d: X-Cache %q, want MISS (a fallback's vectors are not stored)", i, got)
		}
	}
	// The primary back: its own answer is stored, and answers the next request.
	bad.SetScript(fake.Script{})
	for i, want := range []string{"MISS", "HIT"} {
		// Nothing ejects the primary; a fallback answer is still allowed, and not stored.
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, engine := embedAs(t, base, "l0-alice-key", "emb", "fallback poison test")
			if engine == "bad" {
				if got != want {
					t.Errorf("primary request %d: X-Cache %q, want %s", i, got, want)
				}
				break
			}
			if got != "MISS" {
				t.Fatalf("fallback answer: X-Cache %q, want MISS", got)
			}
			if time.Now().After(deadline) {
				t.Fatal("the primary never served again")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// traceIsolationConfig: two sim replicas with prefix caches, so the prefix picker weighs what
// each holds; alice sends prompts, bob may read his own decision traces, ops every key's.
var traceIsolationConfig = `
debug: {requests: 64}
keys:
  - {name: alice, hash: ` + authHash("l0-alice-key") + `}
  - {name: bob, hash: ` + authHash("l0-bob-key") + `, debug: true}
  - {name: ops, hash: ` + authHash("l0-ops-key") + `, admin: true}
engines:
  s1: {kind: sim, sim: {kv_cache_tokens: 65536}}
  s2: {kind: sim, sim: {kv_cache_tokens: 65536}}
models:
  private: {engines: [s1, s2]}
`

// askTraced sends system and "Hello" to model as key with X-Layer0-Debug and returns the
// request's trace id; streamed, it returns the trace the stream ends with instead.
func askTraced(t *testing.T, base, key, system string, stream bool) (string, *trace.Trace) {
	t.Helper()
	resp, raw := postJSON(t, base+"/v1/messages", key, map[string]any{"model": "private", "max_tokens": 8,
		"temperature": 0, "stream": stream, "system": system,
		"messages": []map[string]string{{"role": "user", "content": "Hello"}}}, "X-Layer0-Debug", "1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", key, resp.StatusCode, raw)
	}
	if !stream {
		return resp.Header.Get("X-Layer0-Trace-Id"), nil
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	js, ok := strings.CutPrefix(lines[len(lines)-1], ": layer0-trace ")
	if !ok {
		t.Fatalf("%s: the stream does not end with its trace:\n%s", key, raw)
	}
	var tr trace.Trace
	if err := json.Unmarshal([]byte(js), &tr); err != nil {
		t.Fatal(err)
	}
	return "", &tr
}

// readTrace reads the trace of request id as key, waiting for it to be kept.
func readTrace(t *testing.T, base, key, id string) *trace.Trace {
	t.Helper()
	var tr trace.Trace
	deadline := time.Now().Add(5 * time.Second)
	for getJSON(t, base+"/debug/requests/"+id, key, &tr) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("trace %s never appeared for %s", id, key)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return &tr
}

// cacheView is what a trace says of the engines' prefix caches: each candidate's cached tokens,
// the pick's reason and the prediction.
func cacheView(tr *trace.Trace) string {
	if tr.Route == nil {
		return "no route"
	}
	s := fmt.Sprintf("reason %s, scope %q;", tr.Route.Reason, tr.Route.CacheScope)
	for _, c := range tr.Route.Candidates {
		s += fmt.Sprintf(" %s cached %d;", c.Replica, c.Cached)
	}
	if p := tr.Route.Prediction; p != nil {
		s += fmt.Sprintf(" predicted %d", p.Predicted)
	}
	return s
}

// maxCached is the most cached tokens a trace gives any candidate.
func maxCached(tr *trace.Trace) int {
	n := 0
	if tr.Route != nil {
		for _, c := range tr.Route.Candidates {
			n = max(n, c.Cached)
		}
	}
	return n
}

// A debug key's own decision traces say nothing of the prompts other keys left in the engines'
// caches, as POST /v1/cache does not: its right guess of alice's system prompt and a wrong guess
// read the same (cached tokens, reason, prediction), by id and inline at a stream's end. Its own
// prompts count, and an admin reading the same trace sees every block the pick weighed.
func TestIsolationDecisionTracePerKey(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, traceIsolationConfig))
	// Bob first sends the prompt's public part himself (another PIN), so that both his guesses
	// find the same blocks of his own: what differs is alice's secret only.
	tenantAnthropic(t, base, "l0-alice-key", "private", pinSystem("9305"))
	askTraced(t, base, "l0-bob-key", pinSystem("0000"), false)

	// Inline, at the end of bob's stream.
	var views [2]string
	for i, pin := range []string{"9305", "5039"} {
		_, tr := askTraced(t, base, "l0-bob-key", pinSystem(pin), true)
		views[i] = cacheView(tr)
		if tr.Route == nil || tr.Route.CacheScope != trace.ScopeOwn {
			t.Errorf("bob's streamed guess %s: inline trace %s, want scope own", pin, views[i])
		}
	}
	if views[0] != views[1] {
		t.Errorf("bob's streamed guesses: right %s, wrong %s: want the same", views[0], views[1])
	}

	// By id.
	tenantAnthropic(t, base, "l0-alice-key", "private", pinSystem("4821"))
	var ids [2]string
	var bobs [2]*trace.Trace
	for i, pin := range []string{"4821", "1234"} {
		ids[i], _ = askTraced(t, base, "l0-bob-key", pinSystem(pin), false)
		bobs[i] = readTrace(t, base, "l0-bob-key", ids[i])
		views[i] = cacheView(bobs[i])
		if bobs[i].Route == nil || bobs[i].Route.CacheScope != trace.ScopeOwn || bobs[i].Route.Reason != "cost" {
			t.Errorf("bob's guess %s: his trace shows %s, want scope own, reason cost", pin, views[i])
		}
		if lines := strings.Join(bobs[i].Lines(), "\n"); strings.Contains(lines, "reason: cache") || !strings.Contains(lines, "cached tokens shown: own") {
			t.Errorf("bob's guess %s: lines\n%s", pin, lines)
		}
	}
	if views[0] != views[1] {
		t.Errorf("bob's guesses: right %s, wrong %s: want the same", views[0], views[1])
	}
	// The admin sees what the pick weighed: alice's blocks too, on bob's right guess.
	if tr := readTrace(t, base, "l0-ops-key", ids[0]); maxCached(tr) <= maxCached(bobs[0]) || tr.Route.CacheScope != "" || tr.Route.Reason != "cache" {
		t.Errorf("admin reading bob's right guess: %s, want more cached than bob's %s, reason cache", cacheView(tr), views[0])
	}

	// Bob's own prompt, sent again, is his to see cached, whole.
	mine := "Bob's own instructions, which only he sends. " + strings.Repeat("Answer in one short sentence. ", 12)
	askTraced(t, base, "l0-bob-key", mine, false)
	id, _ := askTraced(t, base, "l0-bob-key", mine, false)
	if tr := readTrace(t, base, "l0-bob-key", id); maxCached(tr) < 64 || tr.Route.CacheScope != trace.ScopeOwn {
		t.Errorf("bob's own prompt again: %s, want his blocks cached", cacheView(tr))
	}
}
