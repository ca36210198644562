package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// TestGatewayExhaustedKeyIsRefusedBeforeCounting checks that a key with no requests left is
// refused at once, whatever the size of its body, on /v1/messages and on count_tokens, and that
// count_tokens counts against the key's requests per minute.
func TestGatewayExhaustedKeyIsRefusedBeforeCounting(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: a, hash: `+authHash("l0-exhaust")+`, limits: {requests_per_minute: 2}}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
`))
	post := func(path, text string) (int, string) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"model": "m", "max_tokens": 1,
			"messages": []map[string]any{{"role": "user", "content": text}}})
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", "l0-exhaust")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A count and a message: the key's two requests of the minute.
	if code, body := post("/v1/messages/count_tokens", "hello"); code != http.StatusOK {
		t.Fatalf("count_tokens: got %d %s, want 200", code, body)
	}
	if code, body := post("/v1/messages", "hello"); code != http.StatusOK {
		t.Fatalf("messages: got %d %s, want 200", code, body)
	}
	huge := strings.Repeat("a", 30<<20)
	for i, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		if i > 0 {
			// The limit gives a request back every 30 s: on a slow machine the first refusal
			// may take that long, so the key is exhausted again (small requests) first.
			for n := 0; n < 3; n++ {
				if code, _ := post(path, "hello"); code == http.StatusTooManyRequests {
					break
				}
			}
		}
		start := time.Now()
		code, body := post(path, huge)
		took := time.Since(start)
		if code != http.StatusTooManyRequests || !strings.Contains(body, "2 requests per minute") {
			t.Errorf("%s with the key exhausted: got %d %.200s, want 429 on requests per minute", path, code, body)
		}
		// Sending and decoding 30 MB takes a fraction of this; counting its tokens took 11 s
		// and more before the limit was checked first.
		if took > refusalBudget {
			t.Errorf("%s with the key exhausted: refused after %v, want under %v", path, took, refusalBudget)
		}
	}
}

// TestGatewayInputLimitBoundsCountTokens: a key with only an input-token limit (100 a minute)
// sending 1 MB of letters is refused with a 429 in Anthropic's format on /v1/messages, on
// count_tokens (which used to tokenize the whole prompt and answer 200) and on POST /v1/cache,
// and count_tokens meets
// limits.max_content_bytes as a request does. That the refusal tokenizes nothing is proven in
// the pipeline's TestServeRefusesOnALowerBound.
func TestGatewayInputLimitBoundsCountTokens(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: a, hash: `+authHash("l0-intok")+`, limits: {input_tokens_per_minute: 100}}
limits: {max_content_bytes: 2000000}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
`))
	c := anthropicClient(base, option.WithAPIKey("l0-intok"))
	ctx := context.Background()
	letters := make([]byte, 1<<20)
	for i := range letters {
		letters[i] = byte('a' + (i*7919+i*i/3)%26)
	}
	msgs := userText(string(letters))
	_, cerr := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "m", Messages: msgs})
	_, merr := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 1, Messages: msgs})
	for what, err := range map[string]error{"count_tokens": cerr, "messages": merr} {
		var e *anthropic.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusTooManyRequests ||
			!strings.Contains(e.RawJSON(), `"type":"rate_limit_error"`) || !strings.Contains(e.RawJSON(), "limit of 100 input tokens") {
			t.Errorf("%s with 1 MB against 100 tokens a minute: got %v, want a 429 rate_limit_error", what, err)
		}
	}
	// POST /v1/cache tokenizes the prompt too: the same check.
	body, err := json.Marshal(map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": string(letters)}}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/cache", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "l0-intok")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(answer), "limit of 100 input tokens") {
		t.Errorf("POST /v1/cache with 1 MB: got %d %.200s, want the 429", resp.StatusCode, answer)
	}
	if n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "m", Messages: userText("hello")}); err != nil || n.InputTokens == 0 {
		t.Errorf("count_tokens of a small prompt: got %+v, %v", n, err)
	}
	big := userText(strings.Repeat("word ", 500000)) // 2.5 MB: past max_content_bytes
	_, err = c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "m", Messages: big})
	var e *anthropic.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || !strings.Contains(e.RawJSON(), "invalid_request_error") {
		t.Errorf("count_tokens past max_content_bytes: got %v, want a 400", err)
	}
}
