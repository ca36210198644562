package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// testConfig is the gateway the SDK tests run against: healthy sims and sims that fail in every
// way the error mapping must handle.
const testConfig = `
engines:
  sim: {kind: sim}
  echo: {kind: sim, sim: {mode: echo}}
  e400: {kind: sim, sim: {fail: {status: 400, message: "engine says no"}}}
  e401: {kind: sim, sim: {fail: {status: 401}}}
  e403: {kind: sim, sim: {fail: {status: 403}}}
  e429: {kind: sim, sim: {fail: {status: 429}}}
  e500: {kind: sim, sim: {fail: {status: 500}}}
  e504: {kind: sim, sim: {fail: {status: 504}}}
  e529: {kind: sim, sim: {fail: {status: 529}}}
  midstream: {kind: sim, sim: {fail: {after_tokens: 3, message: "engine fell over"}}}
  flaky: {kind: sim, sim: {fail: {status: 429, first_requests: 2}}}
models:
  sim: {engines: [sim]}
  claude-3-5-sonnet-20240620: {engines: [sim]}
  echo: {engines: [echo]}
  e400: {engines: [e400]}
  e401: {engines: [e401]}
  e403: {engines: [e403]}
  e429: {engines: [e429]}
  e500: {engines: [e500]}
  e504: {engines: [e504]}
  e529: {engines: [e529]}
  midstream: {engines: [midstream]}
  flaky: {engines: [flaky]}
  tiny: {engines: [sim], context_window: 5}
`

// startGateway serves cfg on a real loopback listener and returns its base URL.
func startGateway(t testing.TB, cfgText string) string {
	t.Helper()
	_, base := serveGateway(t, parseConfig(t, cfgText))
	return base
}

func anthropicClient(base string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
	}, opts...)...)
}

func userText(s string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(s))}
}

func TestAnthropicSDKMessage(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	ctx := context.Background()
	msg, err := c.Messages.New(ctx, anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 200, Messages: userText("Tell me about gateways."),
		System: []anthropic.TextBlockParam{{Text: "You are terse."}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg.ID, "msg_") {
		t.Errorf("id: got %q, want msg_ prefix", msg.ID)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text == "" {
		t.Fatalf("content: got %+v, want one non-empty text block", msg.Content)
	}
	if msg.StopReason != anthropic.StopReasonEndTurn {
		t.Errorf("stop_reason: got %q, want end_turn", msg.StopReason)
	}
	if msg.Usage.InputTokens == 0 || msg.Usage.OutputTokens == 0 {
		t.Errorf("usage: got %+v, want input and output counts", msg.Usage)
	}
	if got, want := string(msg.Model), "sim"; got != want {
		t.Errorf("model: got %q, want %q", got, want)
	}

	// Same prompt, same answer: the sim is deterministic; the repeat hits its prefix cache.
	again, err := c.Messages.New(ctx, anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 200, Messages: userText("Tell me about gateways."),
		System: []anthropic.TextBlockParam{{Text: "You are terse."}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if again.Content[0].Text != msg.Content[0].Text {
		t.Errorf("repeat: got %q, want %q", again.Content[0].Text, msg.Content[0].Text)
	}

	// max_tokens caps the answer.
	short, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "sim", MaxTokens: 3, Messages: userText("Tell me about gateways.")})
	if err != nil {
		t.Fatal(err)
	}
	if short.StopReason != anthropic.StopReasonMaxTokens || short.Usage.OutputTokens != 3 {
		t.Errorf("max_tokens: got stop %q with %d tokens, want max_tokens with 3", short.StopReason, short.Usage.OutputTokens)
	}
}

func TestAnthropicSDKEchoAndStopSequence(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "echo", MaxTokens: 100, Messages: userText("alpha beta gamma delta"),
		StopSequences: []string{"gamma"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonStopSequence || msg.StopSequence != "gamma" {
		t.Errorf("stop: got %q %q, want stop_sequence gamma", msg.StopReason, msg.StopSequence)
	}
	if got, want := msg.Content[0].Text, "alpha beta "; got != want {
		t.Errorf("text: got %q, want %q", got, want)
	}
}

func TestAnthropicSDKStreamAccumulates(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 50, Messages: userText("Stream me something."),
	})
	var acc anthropic.Message
	var deltas int
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "content_block_delta" {
			deltas++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(acc.ID, "msg_") || deltas == 0 || acc.Content[0].Text == "" {
		t.Fatalf("accumulated: id %q, %d deltas, content %+v", acc.ID, deltas, acc.Content)
	}
	if acc.StopReason == "" || acc.Usage.OutputTokens == 0 || acc.Usage.InputTokens == 0 {
		t.Errorf("accumulated: stop %q usage %+v", acc.StopReason, acc.Usage)
	}
	// The streamed answer equals the non-streamed one.
	full, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 50, Messages: userText("Stream me something."),
	})
	if err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != full.Content[0].Text || acc.StopReason != full.StopReason ||
		acc.Usage.OutputTokens != full.Usage.OutputTokens {
		t.Errorf("stream vs JSON: got %q/%s/%d, want %q/%s/%d", acc.Content[0].Text, acc.StopReason,
			acc.Usage.OutputTokens, full.Content[0].Text, full.StopReason, full.Usage.OutputTokens)
	}
}

func weatherTool() anthropic.ToolUnionParam {
	return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name:        "get_weather",
		Description: anthropic.String("Current weather for a city"),
		InputSchema: anthropic.ToolInputSchemaParam{
			Properties: map[string]any{
				"city":  map[string]any{"type": "string"},
				"units": map[string]any{"type": "string", "enum": []string{"c", "f"}},
				"days":  map[string]any{"type": "integer"},
			},
			Required: []string{"city", "units"},
		},
	}}
}

func TestAnthropicSDKToolUseStreamed(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 200, Messages: userText("What's the weather in Paris?"),
		Tools:      []anthropic.ToolUnionParam{weatherTool()},
		ToolChoice: anthropic.ToolChoiceParamOfTool("get_weather"),
	})
	var acc anthropic.Message
	var jsonDeltas int
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "input_json_delta" {
			jsonDeltas++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.StopReason != anthropic.StopReasonToolUse {
		t.Errorf("stop: got %q, want tool_use", acc.StopReason)
	}
	var tu *anthropic.ContentBlockUnion
	for i := range acc.Content {
		if acc.Content[i].Type == "tool_use" {
			tu = &acc.Content[i]
		}
	}
	if tu == nil {
		t.Fatalf("no tool_use block in %+v", acc.Content)
	}
	if !strings.HasPrefix(tu.ID, "toolu_") || tu.Name != "get_weather" || jsonDeltas == 0 {
		t.Errorf("tool_use: id %q name %q, %d input_json_delta events", tu.ID, tu.Name, jsonDeltas)
	}
	in := string(tu.Input)
	if !strings.Contains(in, `"city":`) || !strings.Contains(in, `"units":`) {
		t.Errorf("tool input %s lacks required properties", in)
	}

	// The conversation continues with the tool result.
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 100, Tools: []anthropic.ToolUnionParam{weatherTool()},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("What's the weather in Paris?")),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock(tu.ID, tu.Input, tu.Name)),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(tu.ID, "18C and sunny", false)),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonEndTurn || msg.Content[0].Type != "text" {
		t.Errorf("after tool result: got %q %+v, want end_turn with text", msg.StopReason, msg.Content)
	}
}

func TestAnthropicSDKCountTokensAndModels(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	ctx := context.Background()
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "sim", Messages: userText("How many tokens is this sentence?"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens < 7 || n.InputTokens > 30 {
		t.Errorf("count_tokens: got %d, want a plausible count", n.InputTokens)
	}

	page, err := c.Models.List(ctx, anthropic.ModelListParams{Limit: anthropic.Int(3)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 3 || !page.HasMore {
		t.Fatalf("models page: got %d models, has_more %v; want 3, true", len(page.Data), page.HasMore)
	}
	var all []string
	iter := c.Models.ListAutoPaging(ctx, anthropic.ModelListParams{Limit: anthropic.Int(4)})
	for iter.Next() {
		all = append(all, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(all) != 13 {
		t.Errorf("auto-paged models: got %d (%v), want 13", len(all), all)
	}
	m, err := c.Models.Get(ctx, "echo", anthropic.ModelGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "echo" || m.DisplayName != "echo" || m.Type != "model" {
		t.Errorf("model: got %+v", m)
	}
	_, err = c.Models.Get(ctx, "nope", anthropic.ModelGetParams{})
	assertAPIError(t, err, 404, "not_found_error")
}

func assertAPIError(t *testing.T, err error, status int, typ string) {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("got %v (%T), want *anthropic.Error %d", err, err, status)
	}
	if ae.StatusCode != status || string(ae.Type()) != typ {
		t.Errorf("got %d %q, want %d %q (%s)", ae.StatusCode, ae.Type(), status, typ, ae.RawJSON())
	}
	if !strings.HasPrefix(ae.RequestID, "L0-") {
		t.Errorf("request id: got %q, want L0- prefix", ae.RequestID)
	}
}

func TestAnthropicSDKErrorTypes(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	tests := []struct {
		model  string
		status int
		typ    string
	}{
		{"e400", 400, "invalid_request_error"},
		{"e401", 401, "authentication_error"},
		{"e403", 403, "permission_error"},
		{"missing-model", 404, "not_found_error"},
		{"e429", 429, "rate_limit_error"},
		{"e500", 502, "api_error"},
		{"e504", 504, "timeout_error"},
		{"e529", 529, "overloaded_error"},
		{"tiny", 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
				Model: anthropic.Model(tt.model), MaxTokens: 10, Messages: userText("hello there, engine"),
			})
			assertAPIError(t, err, tt.status, tt.typ)
			// Streaming requests fail the same way when nothing was sent yet.
			s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
				Model: anthropic.Model(tt.model), MaxTokens: 10, Messages: userText("hello there, engine"),
			})
			for s.Next() {
			}
			assertAPIError(t, s.Err(), tt.status, tt.typ)
		})
	}

	// Over the body limit: 413.
	small := anthropicClient(startGateway(t, "server: {max_body_bytes: 2048}\n"))
	_, err := small.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 10, Messages: userText(strings.Repeat("big ", 1000)),
	})
	assertAPIError(t, err, 413, "request_too_large")
}

func TestAnthropicSDKMidStreamError(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "midstream", MaxTokens: 100, Messages: userText("go on then"),
	})
	var deltas int
	for s.Next() {
		if s.Current().Type == "content_block_delta" {
			deltas++
		}
	}
	if deltas == 0 {
		t.Error("got no deltas before the failure")
	}
	err := s.Err()
	if err == nil || !strings.Contains(err.Error(), "engine fell over") {
		t.Errorf("stream error: got %v, want the engine's failure", err)
	}
}

func TestAnthropicSDKRetries429(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig), option.WithMaxRetries(3))
	var attempts atomic.Int32
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "flaky", MaxTokens: 10, Messages: userText("retry me"),
	}, option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		attempts.Add(1)
		resp, err := next(r)
		if err == nil && resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without retry-after")
		}
		return resp, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := attempts.Load(); got != 3 {
		t.Errorf("attempts: got %d, want 3 (two 429s, then success)", got)
	}
	if msg.StopReason == "" {
		t.Error("no stop reason after retries")
	}
}

func TestThousandConcurrentStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short")
	}
	base := startGateway(t, testConfig)
	c := anthropicClient(base, option.WithHTTPClient(&http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 0,
	}}))
	want, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "sim", MaxTokens: 40, Messages: userText("concurrency"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: "sim", MaxTokens: 40, Messages: userText("concurrency"),
			})
			var acc anthropic.Message
			for s.Next() {
				if err := acc.Accumulate(s.Current()); err != nil {
					failed.Add(1)
					return
				}
			}
			if err := s.Err(); err != nil || len(acc.Content) != 1 || acc.Content[0].Text != want.Content[0].Text ||
				acc.Usage.OutputTokens != want.Usage.OutputTokens {
				if failed.Add(1) < 5 {
					t.Errorf("stream %d: err %v, content %+v", i, err, acc.Content)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		resp, _ := http.Get(base + "/metrics")
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "layer0_requests_total") {
				t.Log(l)
			}
		}
		t.Fatalf("%d of 1000 streams failed", n)
	}
}
