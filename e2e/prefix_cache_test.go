package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

var prefixCacheConfig = `
keys:
  - name: user
    hash: ` + auth.HashHex("l0-user-key") + `
  - name: tiny
    hash: ` + auth.HashHex("l0-tiny-key") + `
    limits: {requests_per_minute: 1}
engines:
  one: {kind: sim, sim: {kv_cache_tokens: 65536}}
  b: {kind: sim}
  c: {kind: sim}
  hosted: {kind: anthropic, url: "http://127.0.0.1:1"}
models:
  sim: {engines: [one]}
  pool: {engines: [b, c]}
  claude: {engines: [hosted]}
aliases:
  fast: pool
`

type cacheAnswer struct {
	Hit          bool    `json:"hit"`
	Ratio        float64 `json:"ratio"`
	CachedTokens int     `json:"cached_tokens"`
	PromptTokens int     `json:"prompt_tokens"`
	Replica      string  `json:"replica"`
}

type cacheTurn struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type prompt struct {
	Model     string      `json:"model"`
	MaxTokens int         `json:"max_tokens,omitempty"`
	System    string      `json:"system,omitempty"`
	Messages  []cacheTurn `json:"messages"`
}

// postJSON posts v as JSON to url with key (x-api-key) and any further headers (name, value
// pairs), and returns the response and its whole body.
func postJSON(t *testing.T, url, key string, v any, header ...string) (*http.Response, []byte) {
	t.Helper()
	body, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// served sends p through the gateway and returns the engine's usage and the replica.
func served(t *testing.T, base string, p prompt) (input, cacheRead int, replica string) {
	t.Helper()
	p.MaxTokens = 5
	resp, body := postJSON(t, base+"/v1/messages", "l0-user-key", p)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("messages: %d %s", resp.StatusCode, body)
	}
	var m struct {
		Usage struct {
			InputTokens          int `json:"input_tokens"`
			CacheReadInputTokens int `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m.Usage.InputTokens, m.Usage.CacheReadInputTokens, resp.Header.Get("X-Layer0-Engine")
}

func queryCache(t *testing.T, base string, p prompt) cacheAnswer {
	t.Helper()
	p.MaxTokens = 0
	resp, body := postJSON(t, base+"/v1/cache", "l0-user-key", p)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/cache: %d %s", resp.StatusCode, body)
	}
	var a cacheAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if h := resp.Header.Get("X-Cache-Ratio"); h != strconv.FormatFloat(a.Ratio, 'f', 3, 64) {
		t.Errorf("X-Cache-Ratio %q, body ratio %v", h, a.Ratio)
	}
	return a
}

var ratioFormat = regexp.MustCompile(`^[01]\.\d{3}$`)

func headCache(t *testing.T, base, key, model, system, user string) (*http.Response, bool, float64) {
	t.Helper()
	q := url.Values{"model": {model}, "system": {system}, "user": {user}}
	req, _ := http.NewRequest(http.MethodHead, base+"/v1/cache?"+q.Encode(), nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp, false, 0
	}
	ratio := resp.Header.Get("X-Cache-Ratio")
	if !ratioFormat.MatchString(ratio) {
		t.Fatalf("X-Cache-Ratio %q", ratio)
	}
	r, _ := strconv.ParseFloat(ratio, 64)
	return resp, resp.Header.Get("X-Cache-Hit") == "true", r
}

// TestPrefixCacheAgreesWithSim checks /v1/cache against the sim's own cache_read_input_tokens
// on the same prompts: the index's estimate and what the engine then reports agree within one
// block.
func TestPrefixCacheAgreesWithSim(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, prefixCacheConfig))
	checkAgreement(t, base, "sim", "one")
}

// TestPrefixCacheAgreesWithOpenAIEngine is the same check through an openai-kind engine: a
// vLLM-compatible server (another layer0 serving a sim at /v1/chat/completions) that reports
// prompt_tokens_details.cached_tokens.
func TestPrefixCacheAgreesWithOpenAIEngine(t *testing.T) {
	_, inner := serveGateway(t, parseConfig(t, `
engines:
  gpu: {kind: sim, sim: {kv_cache_tokens: 65536}}
models:
  served: {engines: [gpu]}
`))
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - name: user
    hash: `+auth.HashHex("l0-user-key")+`
engines:
  vllm: {kind: openai, url: "`+inner+`", prefix_cache: {capacity_tokens: 65536}}
models:
  vllm: {engines: [vllm], upstream_model: served}
`))
	checkAgreement(t, base, "vllm", "vllm")
}

func checkAgreement(t *testing.T, base, model, replica string) {
	t.Helper()
	const block = 16
	system := strings.Repeat("You are the support assistant of a hardware shop; answer politely, cite the manual. ", 30)
	first := prompt{Model: model, System: system, Messages: []cacheTurn{{"user", "My router does not boot. What should I check?"}}}

	// Nothing served yet: nothing cached.
	if resp, hit, r := headCache(t, base, "l0-user-key", model, first.System, first.Messages[0].Content); hit || r != 0 || resp.StatusCode != 200 {
		t.Fatalf("before any request: %d hit=%v ratio=%v", resp.StatusCode, hit, r)
	}
	in, read, _ := served(t, base, first)
	if read != 0 {
		t.Fatalf("first request read %d cached tokens", read)
	}
	n := in + read

	// The same prompt: the index says nearly all of it is cached, and the sim reads as much.
	_, hit, ratio := headCache(t, base, "l0-user-key", model, first.System, first.Messages[0].Content)
	a := queryCache(t, base, first)
	if !hit || !a.Hit || a.PromptTokens != n || a.Replica != replica || a.Ratio != ratio {
		t.Fatalf("same prompt: HEAD hit=%v ratio=%v, POST %+v; prompt %d tokens", hit, ratio, a, n)
	}
	_, read, _ = served(t, base, first)
	t.Logf("same prompt: HEAD ratio %v, index %+v; sim read %d of %d", ratio, a, read, n)
	if d := a.CachedTokens - read; d < 0 || d > block {
		t.Errorf("same prompt: index %d cached tokens, sim read %d", a.CachedTokens, read)
	}
	if math.Abs(ratio-float64(read)/float64(n)) > float64(block)/float64(n) {
		t.Errorf("same prompt: X-Cache-Ratio %v, sim %d/%d", ratio, read, n)
	}

	// Longer prompts sharing a prefix: another question under the same system prompt, and the
	// conversation continued.
	for _, longer := range []prompt{
		{Model: model, System: system, Messages: []cacheTurn{{"user", "How do I reset the admin password on the model X200, step by step, please?"}}},
		{Model: model, System: system, Messages: []cacheTurn{first.Messages[0], {"assistant", "Check the power supply first."}, {"user", "It is plugged in and the light is green."}}},
	} {
		a := queryCache(t, base, longer)
		in, read, _ := served(t, base, longer)
		t.Logf("longer prompt: index %+v; sim read %d of %d", a, read, in+read)
		if a.PromptTokens != in+read {
			t.Errorf("index counts %d prompt tokens, the sim %d", a.PromptTokens, in+read)
		}
		if d := a.CachedTokens - read; d < -block || d > block || read == 0 {
			t.Errorf("%q: index %d cached tokens, sim read %d (prompt %d)", longer.Messages[len(longer.Messages)-1].Content, a.CachedTokens, read, in+read)
		}
		if a.Ratio <= 0.3 || a.Ratio >= 1 {
			t.Errorf("ratio %v", a.Ratio)
		}
	}
}

// TestPrefixCacheBestReplica checks that /v1/cache names the replica that served the prompt, for
// a model, an alias, and never for a model of engines without an index.
func TestPrefixCacheBestReplica(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, prefixCacheConfig))
	p := prompt{Model: "pool", System: strings.Repeat("Shared instructions for group seven. ", 40),
		Messages: []cacheTurn{{"user", "hello"}}}
	_, _, replica := served(t, base, p)
	if replica != "b" && replica != "c" {
		t.Fatalf("served by %q", replica)
	}
	for _, model := range []string{"pool", "fast"} {
		p.Model = model
		if a := queryCache(t, base, p); !a.Hit || a.Replica != replica || a.Ratio < 0.9 {
			t.Errorf("%s: %+v, want replica %s", model, a, replica)
		}
	}
	p.Model = "claude"
	if a := queryCache(t, base, p); a.Hit || a.Replica != "" || a.PromptTokens == 0 {
		t.Errorf("a model without an index: %+v", a)
	}
}

// TestPrefixCacheAuthAndLimits checks that /v1/cache is authenticated, permission-checked and
// limited like any request, and its methods.
func TestPrefixCacheAuthAndLimits(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, prefixCacheConfig))
	if resp, _, _ := headCache(t, base, "wrong", "sim", "s", "u"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad key: %d", resp.StatusCode)
	}
	if resp, _, _ := headCache(t, base, "l0-user-key", "nope", "s", "u"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown model: %d", resp.StatusCode)
	}
	if resp, _, _ := headCache(t, base, "l0-user-key", "", "s", "u"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no model: %d", resp.StatusCode)
	}
	if resp, _, _ := headCache(t, base, "l0-tiny-key", "sim", "s", "u"); resp.StatusCode != http.StatusOK {
		t.Errorf("first request of the tiny key: %d", resp.StatusCode)
	}
	if resp, _, _ := headCache(t, base, "l0-tiny-key", "sim", "s", "u"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second request of the tiny key (1 per minute): %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/cache", nil)
	req.Header.Set("X-Api-Key", "l0-user-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Errorf("DELETE: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, body := postJSON(t, base+"/v1/cache", "l0-user-key", map[string]any{"model": "sim"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST without messages: %d %s", resp.StatusCode, body)
	}
	// GET answers the JSON too.
	req, _ = http.NewRequest(http.MethodGet, base+"/v1/cache?model=sim&user=hi", nil)
	req.Header.Set("X-Api-Key", "l0-user-key")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var a cacheAnswer
	if err := json.Unmarshal(body, &a); err != nil || resp.StatusCode != 200 || a.PromptTokens == 0 {
		t.Errorf("GET: %d %s (%v)", resp.StatusCode, body, err)
	}
}

// TestPrefixCacheBinaryV1Ratio checks that the binary protocol's version 1 usage frame reports
// the engine's cached share of the prompt, which /v1/cache predicted.
func TestPrefixCacheBinaryV1Ratio(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, prefixCacheConfig))
	system := strings.Repeat("Answer in the voice of a ship's captain. ", 30)
	req := &llm.Request{Model: "sim", MaxTokens: 5, Stream: true, Format: llm.FormatBinary,
		System:   []llm.Block{{Type: llm.BlockText, Text: system}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Where are we headed?"}}}}}
	body, err := binary.AppendRequest(nil, req, binary.Mode{Version: binary.V1})
	if err != nil {
		t.Fatal(err)
	}
	ratio := func() uint32 {
		hr, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
		hr.Header.Set("X-Api-Key", "l0-user-key")
		hr.Header.Set("Content-Type", binary.MediaType)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("binary: %d %q", resp.StatusCode, out)
		}
		d := binary.NewDecoder(binary.V1)
		d.Write(out) //nolint:errcheck // never fails
		for {
			f, ok, err := d.Next()
			if err != nil || !ok {
				t.Fatalf("no usage frame (%v)", err)
			}
			if f.Type == binary.FrameUsage {
				u, err := binary.ParseUsage(binary.V1, f.Payload)
				if err != nil {
					t.Fatal(err)
				}
				return u.CacheHitRatio
			}
		}
	}
	if r := ratio(); r != 0 {
		t.Fatalf("first request: cache_hit_ratio %d", r)
	}
	_, hit, predicted := headCache(t, base, "l0-user-key", "sim", system, "Where are we headed?")
	got := ratio()
	a := queryCache(t, base, prompt{Model: "sim", System: system, Messages: []cacheTurn{{"user", "Where are we headed?"}}})
	t.Logf("cache_hit_ratio %d (0.001%% units), /v1/cache predicted %v (%d of %d tokens)", got, predicted, a.CachedTokens, a.PromptTokens)
	if !hit || got == 0 || math.Abs(float64(got)/100000-predicted) > 16/float64(a.PromptTokens) {
		t.Errorf("binary v1 cache_hit_ratio %d, /v1/cache predicted %v", got, predicted)
	}
}

// TestPrefixRoutingGroups sends groups of users sharing long system prompts to a pool of four
// sims whose caches hold about three groups' prompts each, and compares the share of prompt
// tokens the engines served from their caches under the prefix picker and under p2c.
func TestPrefixRoutingGroups(t *testing.T) {
	run := func(picker string) (float64, map[string]int) {
		_, base := serveGateway(t, parseConfig(t, `
routing: {picker: `+picker+`}
engines:
  a: {kind: sim, sim: {kv_cache_tokens: 4096}}
  b: {kind: sim, sim: {kv_cache_tokens: 4096}}
  c: {kind: sim, sim: {kv_cache_tokens: 4096}}
  d: {kind: sim, sim: {kv_cache_tokens: 4096}}
models:
  pool: {engines: [a, b, c, d]}
`))
		var read, total int
		per := map[string]int{}
		for i := range 160 {
			g := i % 8
			system := strings.Repeat("Group "+strconv.Itoa(g)+" follows the house style guide, section by section. ", 90)
			p := prompt{Model: "pool", System: system, Messages: []cacheTurn{{"user", "Question " + strconv.Itoa(i)}}}
			p.MaxTokens = 5
			resp, body := postJSON(t, base+"/v1/messages", "", p)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var m struct {
				Usage struct {
					InputTokens          int `json:"input_tokens"`
					CacheReadInputTokens int `json:"cache_read_input_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			read += m.Usage.CacheReadInputTokens
			total += m.Usage.InputTokens + m.Usage.CacheReadInputTokens
			per[resp.Header.Get("X-Layer0-Engine")]++
		}
		return float64(read) / float64(total), per
	}
	prefixShare, prefixPer := run("prefix")
	p2cShare, p2cPer := run("p2c")
	t.Logf("share of prompt tokens from cache: prefix %.3f %v, p2c %.3f %v", prefixShare, prefixPer, p2cShare, p2cPer)
	if prefixShare < 0.85 || prefixShare < p2cShare+0.2 {
		t.Errorf("prefix picker: %.3f from cache, p2c %.3f", prefixShare, p2cShare)
	}
	for name, n := range prefixPer {
		if n > 160/2 {
			t.Errorf("replica %s served %d of 160", name, n)
		}
	}
}

// TestPrefixCacheSurvivesReload checks that a reload keeps the index of an unchanged engine (as
// it keeps the engine and its KV cache) and starts afresh for a changed one.
func TestPrefixCacheSurvivesReload(t *testing.T) {
	g, base := serveGateway(t, parseConfig(t, prefixCacheConfig))
	p := prompt{Model: "sim", System: strings.Repeat("Keep this across reloads. ", 60), Messages: []cacheTurn{{"user", "hi"}}}
	served(t, base, p)
	if a := queryCache(t, base, p); !a.Hit {
		t.Fatalf("before the reload: %+v", a)
	}
	// Another model added: engine "one" is unchanged.
	if err := g.Reload(parseConfig(t, strings.Replace(prefixCacheConfig, "  claude:", "  extra: {engines: [b]}\n  claude:", 1))); err != nil {
		t.Fatal(err)
	}
	if a := queryCache(t, base, p); !a.Hit || a.Replica != "one" {
		t.Fatalf("after a reload that kept the engine: %+v", a)
	}
	_, read, _ := served(t, base, p)
	if read == 0 {
		t.Fatal("the sim forgot its cache: the test's premise is wrong")
	}
	// Engine "one" changed (a smaller cache): a new engine, a new index.
	if err := g.Reload(parseConfig(t, strings.Replace(prefixCacheConfig, "kv_cache_tokens: 65536", "kv_cache_tokens: 32768", 1))); err != nil {
		t.Fatal(err)
	}
	if a := queryCache(t, base, p); a.Hit {
		t.Fatalf("after the engine changed: %+v", a)
	}
}

// TestPrefixRoutingSkew sends one group half the requests, sixteen at a time, to four sims
// that take a while per request: the hot prefix must not pile onto the replica that holds it.
func TestPrefixRoutingSkew(t *testing.T) {
	if testing.Short() {
		t.Skip("a second of simulated load")
	}
	const requests, clients = 320, 16
	run := func(routing string) (map[string]int, float64) {
		_, base := serveGateway(t, parseConfig(t, `
routing: `+routing+`
engines:
  a: {kind: sim, sim: {ttft: 20ms, prefill_per_token: 10us, kv_cache_tokens: 131072}}
  b: {kind: sim, sim: {ttft: 20ms, prefill_per_token: 10us, kv_cache_tokens: 131072}}
  c: {kind: sim, sim: {ttft: 20ms, prefill_per_token: 10us, kv_cache_tokens: 131072}}
  d: {kind: sim, sim: {ttft: 20ms, prefill_per_token: 10us, kv_cache_tokens: 131072}}
models:
  pool: {engines: [a, b, c, d]}
`))
		// Each group's prefix warms one replica first, one request at a time.
		for g := range 8 {
			system := strings.Repeat("Group "+strconv.Itoa(g)+" follows the house style guide, section by section. ", 90)
			served(t, base, prompt{Model: "pool", System: system, Messages: []cacheTurn{{"user", "Warm up"}}})
		}
		var mu sync.Mutex
		per := map[string]int{}
		var read, total int
		var wg sync.WaitGroup
		next := make(chan int)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					g := 0
					if i%2 == 1 {
						g = 1 + i/2%7
					}
					system := strings.Repeat("Group "+strconv.Itoa(g)+" follows the house style guide, section by section. ", 90)
					body, _ := json.Marshal(prompt{Model: "pool", MaxTokens: 5, System: system, Messages: []cacheTurn{{"user", "Question " + strconv.Itoa(i)}}})
					resp, err := http.Post(base+"/v1/messages", "application/json", bytes.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					var m struct {
						Usage struct {
							InputTokens          int `json:"input_tokens"`
							CacheReadInputTokens int `json:"cache_read_input_tokens"`
						} `json:"usage"`
					}
					err = json.NewDecoder(resp.Body).Decode(&m)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Errorf("status %d: %v", resp.StatusCode, err)
						return
					}
					mu.Lock()
					per[resp.Header.Get("X-Layer0-Engine")]++
					read += m.Usage.CacheReadInputTokens
					total += m.Usage.InputTokens + m.Usage.CacheReadInputTokens
					mu.Unlock()
				}
			}()
		}
		for i := range requests {
			next <- i
		}
		close(next)
		wg.Wait()
		return per, float64(read) / float64(total)
	}
	busiest := func(per map[string]int) int {
		m := 0
		for _, n := range per {
			m = max(m, n)
		}
		return m
	}
	// Load made cheap against prefill, so that the cost alone would keep the hot group on the
	// replica holding its prefix up to some 50 requests in flight (more than the clients
	// send): only the guard spreads it.
	per, share := run("{picker: prefix, prefix: {load_tokens: 20}}")
	t.Logf("per replica %v, %.3f of prompt tokens from cache", per, share)
	// Pinned, the hot group's replica would serve its half of the requests and more.
	if busiest(per) >= requests/2 {
		t.Errorf("the hot group (half the requests) piled onto one replica: %v", per)
	}
	if share < 0.7 {
		t.Errorf("%.3f of prompt tokens from cache", share)
	}
}

// /v1/cache estimates the prompt the engine gets: a system prompt's directives are stripped
// before it is rendered, as they are before the engine sees it.
func TestPrefixCacheIgnoresDirectives(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, prefixCacheConfig))
	system := strings.Repeat("You answer questions about routers, briefly and precisely. ", 30)
	plain := prompt{Model: "sim", System: system, Messages: []cacheTurn{{"user", "Why does my router reboot?"}}}
	served(t, base, plain)
	withDirective := plain
	withDirective.System = "<|temperature:0.2|>\n" + system
	a, b := queryCache(t, base, plain), queryCache(t, base, withDirective)
	if a.PromptTokens != b.PromptTokens || a.CachedTokens != b.CachedTokens || !a.Hit {
		t.Fatalf("plain %+v, with a directive %+v: want the same estimate, a hit", a, b)
	}
}
