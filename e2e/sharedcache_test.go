package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// sharedCacheReplicas serves two gateways with the response cache shared in srv, in front of one
// fake OpenAI-compatible engine (whose calls are counted) answering after firstByte.
func sharedCacheReplicas(t *testing.T, srv *redistest.Server, firstByte time.Duration) ([]string, *fake.Server) {
	t.Helper()
	vllm := fake.NewOpenAI(fake.Script{Text: "One answer for every replica.", FirstByte: firstByte})
	t.Cleanup(vllm.Close)
	bases := replicas(t, 2, srv, "timeout: 2s, cache: {enabled: true, timeout: 2s, fill_wait: 10s}", fmt.Sprintf(`
engines:
  vllm: {kind: openai, url: %q}
models:
  m: {engines: [vllm], cache: {enabled: true, ttl: 1m}}
`, vllm.URL))
	return bases, vllm
}

// askAnthropic and askOpenAI ask m one question at temperature 0 through the official SDKs and
// return the answer's text and the response (for its cache headers).
func askAnthropic(ctx context.Context, t *testing.T, base, q string) (string, *http.Response) {
	t.Helper()
	var resp *http.Response
	c := anthropicClient(base, option.WithResponseInto(&resp))
	_, turn := anthropicCall(ctx, t, &c, anthropic.MessageNewParams{Model: "m", MaxTokens: 100,
		Temperature: anthropic.Float(0), Messages: userText(q)}, true)
	return turn.text, resp
}

func askOpenAI(ctx context.Context, t *testing.T, base, q string) (string, *http.Response) {
	t.Helper()
	var resp *http.Response
	c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0),
		oaiopt.WithResponseInto(&resp))
	_, turn := openAICall(ctx, t, &c, oai.ChatCompletionNewParams{Model: "m", MaxTokens: oai.Int(100),
		Temperature: oai.Float(0), Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(q)}}, false)
	return turn.text, resp
}

// TestSharedCacheAcrossReplicas: two gateways share the response cache in Redis. A question
// asked of A through the Anthropic SDK (streamed) is a miss there; asked of B through the OpenAI
// SDK (not streamed) it is a hit — B never saw it, so the answer came from Redis — with the same
// text, and the engine was called once.
func TestSharedCacheAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	bases, vllm := sharedCacheReplicas(t, srv, 0)
	ctx := context.Background()
	missText, miss := askAnthropic(ctx, t, bases[0], "Which replica answers?")
	hitText, hit := askOpenAI(ctx, t, bases[1], "Which replica answers?")
	if got := [2]string{cacheHeaders(miss), cacheHeaders(hit)}; got != [2]string{"MISS miss", "HIT hit"} {
		t.Errorf("cache headers on A then B: %q, want a miss then a hit", got)
	}
	if missText == "" || missText != hitText {
		t.Errorf("answers: A %q, B %q; want the same", missText, hitText)
	}
	if n := len(vllm.Requests()); n != 1 {
		t.Errorf("engine calls: %d, want 1", n)
	}
}

// TestSharedCacheFillWait: B misses while A is still calling the (slow) engine for the same
// question: B waits for A's answer in Redis instead of calling the engine, and replays it.
func TestSharedCacheFillWait(t *testing.T) {
	srv := redistest.Start(t)
	bases, vllm := sharedCacheReplicas(t, srv, 1500*time.Millisecond)
	ctx := context.Background()
	var wg sync.WaitGroup
	var aText, bText string
	var aResp, bResp *http.Response
	wg.Add(1)
	go func() {
		defer wg.Done()
		aText, aResp = askAnthropic(ctx, t, bases[0], "A slow question")
	}()
	// B asks once A's call has reached the engine (A holds the fill claim by then).
	deadline := time.Now().Add(10 * time.Second)
	for len(vllm.Requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	bText, bResp = askOpenAI(ctx, t, bases[1], "A slow question")
	wg.Wait()
	if got := [2]string{cacheHeaders(aResp), cacheHeaders(bResp)}; got != [2]string{"MISS miss", "HIT coalesced"} {
		t.Errorf("cache headers of A and B: %q, want A's miss and B coalesced with it", got)
	}
	if aText == "" || aText != bText {
		t.Errorf("answers: A %q, B %q; want the same", aText, bText)
	}
	if n := len(vllm.Requests()); n != 1 {
		t.Errorf("engine calls: %d, want 1 (B waited for A's)", n)
	}
}

// TestSharedCacheRedisDown: with Redis stopped mid-run both gateways go on serving — misses from
// the engine, hits from each replica's memory — and count the store errors; once Redis is back
// the cache is shared again.
func TestSharedCacheRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	bases, vllm := sharedCacheReplicas(t, srv, 0)
	ctx := context.Background()
	askAnthropic(ctx, t, bases[0], "before the outage")
	srv.Stop()
	for i, base := range bases {
		q := fmt.Sprintf("during the outage %d", i)
		if _, r := askAnthropic(ctx, t, base, q); cacheHeaders(r) != "MISS miss" {
			t.Errorf("replica %d, Redis down, a new question: %q, want a miss served", i, cacheHeaders(r))
		}
		if _, r := askOpenAI(ctx, t, base, q); cacheHeaders(r) != "HIT hit" {
			t.Errorf("replica %d, Redis down, the same question again: %q, want a hit from memory", i, cacheHeaders(r))
		}
	}
	if _, r := askOpenAI(ctx, t, bases[0], "before the outage"); cacheHeaders(r) != "HIT hit" {
		t.Errorf("A's own answer from before the outage: %q, want a hit from its memory", cacheHeaders(r))
	}
	var errs float64
	for _, b := range bases {
		errs += metricValue(t, b, "layer0_store_errors_total")
	}
	if errs == 0 {
		t.Errorf("layer0_store_errors_total is 0 after cache operations with Redis down")
	}
	srv.Restart()
	// Each replica sees Redis again at its next probe (every 100ms).
	waitFor(t, "the shared cache back after Redis restarted", func() bool {
		q := fmt.Sprintf("after the outage %d", len(vllm.Requests()))
		_, a := askAnthropic(ctx, t, bases[0], q)
		_, b := askOpenAI(ctx, t, bases[1], q)
		return cacheHeaders(a) == "MISS miss" && cacheHeaders(b) == "HIT hit"
	})
}
