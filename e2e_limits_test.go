package layer0_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
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
