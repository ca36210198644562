package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// TestModelPicker: models.NAME.routing.picker places one model's requests by session and
// another's by prefix in one gateway, whatever routing.picker says for the rest.
func TestModelPicker(t *testing.T) {
	var access syncbuf.Buffer
	_, base := serveGateway(t, parseConfig(t, `
routing: {picker: round_robin}
engines:
  a: {kind: sim}
  b: {kind: sim}
models:
  chat: {engines: [a, b], routing: {picker: sticky}}
  docs: {engines: [a, b], routing: {picker: prefix}}
  rest: {engines: [a, b]}
`), layer0.WithAccessLog(&access))
	client := anthropicClient(base, option.WithHeader("x-session-id", "s1"))
	for _, m := range []string{"chat", "docs", "rest"} {
		if _, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: anthropic.Model(m), MaxTokens: 4,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	waitFor(t, "three access log records", func() bool { return len(access.Lines()) >= 3 })
	picks := map[string]string{}
	for _, line := range access.Lines() {
		var rec struct {
			Model string `json:"model"`
			Pick  string `json:"pick"`
		}
		if line != "" && json.Unmarshal([]byte(line), &rec) == nil {
			picks[rec.Model] = rec.Pick
		}
	}
	if picks["chat"] != "session" || picks["docs"] != "load" || picks["rest"] != "" {
		t.Errorf("decisions by model: %v; want chat by session, docs by prefix (a new prompt: load), rest by round robin (none recorded)", picks)
	}
	if _, err := config.Parse([]byte("models:\n  m: {engines: [s], routing: {picker: fastest}}\nengines:\n  s: {kind: sim}\n")); err == nil ||
		!strings.Contains(err.Error(), "models.m.routing.picker") {
		t.Errorf("an unknown picker: %v", err)
	}
}
