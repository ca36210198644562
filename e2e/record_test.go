package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// TestAccessLogRecordsWhatWasSent checks that a stream which fails or is abandoned after it began
// is logged with the status the client actually received, why it ended, and the tokens that
// were streamed — not as a 500 with nothing served.
func TestAccessLogRecordsWhatWasSent(t *testing.T) {
	var access syncbuf.Buffer
	_, base := serveGateway(t, parseConfig(t, `
engines:
  broken: {kind: sim, sim: {fail: {after_tokens: 3, message: "engine fell over"}}}
  slow: {kind: sim, sim: {inter_token_latency: 20ms}}
models:
  broken: {engines: [broken]}
  slow: {engines: [slow]}
`), layer0.WithAccessLog(&access))
	c := anthropicClient(base)

	s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "broken", MaxTokens: 100, Messages: userText("go on then"),
	})
	for s.Next() {
	}
	if s.Err() == nil {
		t.Fatal("broken stream: got no error")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s = c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
		Model: "slow", MaxTokens: 1000, Messages: userText("a long answer please"),
	})
	for s.Next() {
		if s.Current().Type == "content_block_delta" {
			cancel()
			break
		}
	}
	s.Close()

	records := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, line := range strings.Split(strings.TrimSpace(access.String()), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil {
				out[r["model"].(string)] = r
			}
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(records()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	recs := records()
	b, s2 := recs["broken"], recs["slow"]
	if b == nil || s2 == nil {
		t.Fatalf("got records %v, want one per model", recs)
	}
	if b["status"] != 200.0 || b["error_type"] != "api_error" || b["output_tokens"] != 3.0 {
		t.Errorf("failed stream: got status %v error_type %v output_tokens %v, want 200 api_error 3", b["status"], b["error_type"], b["output_tokens"])
	}
	if s2["status"] != 200.0 || s2["error_type"] != "canceled" {
		t.Errorf("abandoned stream: got status %v error_type %v, want 200 canceled", s2["status"], s2["error_type"])
	}
}
