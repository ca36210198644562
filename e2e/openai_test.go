package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// crossGateway starts the fakes and two gateways: B serves the fake vLLM as "vllm"; A serves
// the sim, the fake vLLM, the fake Anthropic API and B (a layer0 → layer0 chain).
func crossGateway(t *testing.T) string {
	t.Helper()
	vllm := fake.NewOpenAI(fake.Script{Text: "Hello from the fake engine.", CachedTokens: 3})
	claude := fake.NewAnthropic(fake.Script{Text: "Hello from the fake engine.", CachedTokens: 3})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	b := vllmPeer(t, vllm.URL)
	return startGateway(t, fmt.Sprintf(`
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: %q, timeouts: {first_byte: 5s, idle: 5s, total: 20s}}
  claude: {kind: anthropic, url: %q}
  peer: {kind: layer0, url: %q}
models:
  sim: {engines: [sim]}
  vllm: {engines: [vllm], upstream_model: meta-llama/Llama-3.1-8B-Instruct}
  claude: {engines: [claude], upstream_model: claude-sonnet-4-5}
  chain: {engines: [peer], upstream_model: vllm}
`, vllm.URL, claude.URL, b))
}

// vllmPeer starts a gateway that serves the OpenAI-format engine at url as "vllm", the far end
// of a layer0 → layer0 chain.
func vllmPeer(t *testing.T, url string) string {
	t.Helper()
	return startGateway(t, fmt.Sprintf(`
engines:
  vllm: {kind: openai, url: %q}
models:
  vllm: {engines: [vllm], upstream_model: meta-llama/Llama-3.1-8B-Instruct}
`, url))
}

// turn is what one call returned, in either client's terms.
type turn struct {
	text     string
	toolID   string
	toolName string
	toolArgs string
	stop     string // canonical spelling: end_turn, tool_use, max_tokens, refusal
	input    int64
	output   int64
	id       string
}

const toolPrompt = "What is the weather in Paris? Use get_weather."

func TestCrossProduct(t *testing.T) {
	base := crossGateway(t)
	for _, client := range []string{"openai", "anthropic"} {
		for _, model := range []string{"sim", "vllm", "claude", "chain"} {
			for _, stream := range []bool{false, true} {
				for _, tools := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/stream=%v/tools=%v", client, model, stream, tools)
					t.Run(name, func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						defer cancel()
						run := openAITurns
						if client == "anthropic" {
							run = anthropicTurns
						}
						turns := run(ctx, t, base, model, stream, tools)
						checkTurns(t, model, tools, turns)
					})
				}
			}
		}
	}
}

func checkTurns(t *testing.T, model string, tools bool, turns []turn) {
	t.Helper()
	if len(turns) == 0 {
		return
	}
	first := turns[0]
	if first.input == 0 || first.output == 0 {
		t.Errorf("usage: got input %d output %d, want both", first.input, first.output)
	}
	if !tools {
		if first.stop != "end_turn" || first.text == "" {
			t.Errorf("got stop %q text %q, want end_turn and text", first.stop, first.text)
		}
		if model != "sim" && first.text != "Hello from the fake engine." {
			t.Errorf("got text %q", first.text)
		}
		return
	}
	if first.stop != "tool_use" || first.toolName != "get_weather" || first.toolID == "" {
		t.Fatalf("got %+v, want a get_weather tool call", first)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(first.toolArgs), &args); err != nil {
		t.Errorf("tool arguments %q are not JSON: %v", first.toolArgs, err)
	}
	if model != "sim" && (args["city"] != "Paris" || args["unit"] != "c") {
		t.Errorf("got arguments %v", args)
	}
	if len(turns) < 2 || turns[1].stop != "end_turn" || turns[1].text == "" {
		t.Errorf("after the tool result: got %+v, want a text answer", turns[1:])
	}
}

var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{
	"city": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string"}}, "required": []string{"city"}}

func openAITurns(ctx context.Context, t *testing.T, base, model string, stream, tools bool) []turn {
	c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0))
	p := oai.ChatCompletionNewParams{
		Model:     model,
		MaxTokens: oai.Int(200),
		Messages:  []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are terse."), oai.UserMessage("Say hello.")},
	}
	if tools {
		p.Messages[1] = oai.UserMessage(toolPrompt)
		p.Tools = []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Description: oai.String("Current weather"), Parameters: weatherSchema})}
	}
	var turns []turn
	for i := 0; i < 2; i++ {
		msg, tr := openAICall(ctx, t, &c, p, stream)
		turns = append(turns, tr)
		// An OpenAI client on an OpenAI engine takes the pass-through path: the engine's own
		// completion id comes back, where translation would have made a new one.
		if passed := tr.id == "chatcmpl-8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a"; passed != (model == "vllm") {
			t.Errorf("got id %q: pass-through taken %v, want %v", tr.id, passed, model == "vllm")
		}
		if !tools || t.Failed() || len(msg.ToolCalls) == 0 {
			break
		}
		if !strings.HasPrefix(msg.ToolCalls[0].ID, "call_") && !strings.HasPrefix(msg.ToolCalls[0].ID, "chatcmpl-tool-") {
			t.Errorf("tool call id %q: want call_ (or the engine's own)", msg.ToolCalls[0].ID)
		}
		p.Messages = append(p.Messages, msg.ToParam(), oai.ToolMessage("Sunny, 21 degrees.", msg.ToolCalls[0].ID))
	}
	return turns
}

func openAICall(ctx context.Context, t *testing.T, c *oai.Client, p oai.ChatCompletionNewParams, stream bool) (oai.ChatCompletionMessage, turn) {
	t.Helper()
	var cc oai.ChatCompletion
	if stream {
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
		s := c.Chat.Completions.NewStreaming(ctx, p)
		var acc oai.ChatCompletionAccumulator
		ids := map[string]bool{}
		for s.Next() {
			ch := s.Current()
			ids[ch.ID] = true
			acc.AddChunk(ch)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if len(ids) != 1 {
			t.Errorf("got %d chunk ids, want one per stream", len(ids))
		}
		cc = acc.ChatCompletion
	} else {
		r, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		cc = *r
	}
	if !strings.HasPrefix(cc.ID, "chatcmpl-") {
		t.Errorf("id %q: want chatcmpl- prefix", cc.ID)
	}
	if cc.Model != p.Model {
		t.Errorf("model: got %q, want %q", cc.Model, p.Model)
	}
	if len(cc.Choices) != 1 {
		t.Fatalf("got %d choices", len(cc.Choices))
	}
	ch := cc.Choices[0]
	tr := turn{text: ch.Message.Content, input: cc.Usage.PromptTokens, output: cc.Usage.CompletionTokens, id: cc.ID}
	tr.stop = map[string]string{"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}[ch.FinishReason]
	if len(ch.Message.ToolCalls) > 0 {
		tc := ch.Message.ToolCalls[0]
		tr.toolID, tr.toolName, tr.toolArgs = tc.ID, tc.Function.Name, tc.Function.Arguments
	}
	return ch.Message, tr
}

func anthropicTurns(ctx context.Context, t *testing.T, base, model string, stream, tools bool) []turn {
	c := anthropicClient(base)
	p := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 200, Messages: userText("Say hello."),
		System: []anthropic.TextBlockParam{{Text: "You are terse."}}}
	if tools {
		p.Messages = userText(toolPrompt)
		p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Current weather"),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherSchema["properties"], Required: []string{"city"}}}}}
	}
	var turns []turn
	for i := 0; i < 2; i++ {
		msg, tr := anthropicCall(ctx, t, &c, p, stream)
		turns = append(turns, tr)
		// An Anthropic client on a Messages engine takes the pass-through path: the engine's
		// own message id comes back.
		if passed := tr.id == "msg_01XFDUDYJgAACzvnptvVoYEL"; passed != (model == "claude") {
			t.Errorf("got id %q: pass-through taken %v, want %v", tr.id, passed, model == "claude")
		}
		if !tools || t.Failed() || tr.toolID == "" {
			break
		}
		p.Messages = append(p.Messages, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(tr.toolID, "Sunny, 21 degrees.", false)))
	}
	return turns
}

func anthropicCall(ctx context.Context, t *testing.T, c *anthropic.Client, p anthropic.MessageNewParams, stream bool) (anthropic.Message, turn) {
	t.Helper()
	var msg anthropic.Message
	if stream {
		s := c.Messages.NewStreaming(ctx, p)
		for s.Next() {
			ev := s.Current()
			// Clients read the prompt's size from message_start, whatever the engine.
			if u := ev.Message.Usage; ev.Type == "message_start" && u.InputTokens+u.CacheReadInputTokens == 0 {
				t.Errorf("message_start without input tokens: %s", ev.RawJSON())
			}
			if err := msg.Accumulate(ev); err != nil {
				t.Fatalf("accumulate: %v", err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
	} else {
		m, err := c.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		msg = *m
	}
	if !strings.HasPrefix(msg.ID, "msg_") {
		t.Errorf("id %q: want msg_ prefix", msg.ID)
	}
	if string(msg.Model) != string(p.Model) {
		t.Errorf("model: got %q, want %q", msg.Model, p.Model)
	}
	tr := turn{stop: string(msg.StopReason), input: msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens, output: msg.Usage.OutputTokens, id: msg.ID}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			tr.text += b.Text
		case "tool_use":
			if tr.toolID == "" {
				tr.toolID, tr.toolName, tr.toolArgs = b.ID, b.Name, string(b.Input)
			}
		}
	}
	return msg, tr
}

func openAIClient(base string) oai.Client {
	return oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0))
}

// TestOpenAIErrors checks the OpenAI error bodies the official SDK parses: status, type, code,
// param.
func TestOpenAIErrors(t *testing.T) {
	c := openAIClient(startGateway(t, testConfig))
	ctx := context.Background()
	tests := []struct {
		name   string
		params oai.ChatCompletionNewParams
		status int
		code   string
		param  string
		typ    string
	}{
		{"unknown model", oai.ChatCompletionNewParams{Model: "nope", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}},
			404, "model_not_found", "model", "invalid_request_error"},
		{"n=2", oai.ChatCompletionNewParams{Model: "sim", N: oai.Int(2), Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}},
			400, "", "n", "invalid_request_error"},
		{"no messages", oai.ChatCompletionNewParams{Model: "sim"}, 400, "", "messages", "invalid_request_error"},
		{"rate limited", oai.ChatCompletionNewParams{Model: "e429", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}},
			429, "rate_limit_exceeded", "", "requests"},
		{"overloaded", oai.ChatCompletionNewParams{Model: "e529", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}},
			503, "server_is_overloaded", "", "server_error"},
		{"too long", oai.ChatCompletionNewParams{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("a long prompt that cannot fit")}},
			400, "context_length_exceeded", "messages", "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Chat.Completions.New(ctx, tt.params)
			var e *oai.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *openai.Error", err)
			}
			if e.StatusCode != tt.status || e.Code != tt.code || e.Param != tt.param || e.Type != tt.typ || e.Message == "" {
				t.Errorf("got status %d code %q param %q type %q message %q, want %d %q %q %q",
					e.StatusCode, e.Code, e.Param, e.Type, e.Message, tt.status, tt.code, tt.param, tt.typ)
			}
		})
	}
}

// TestOpenAIMidStreamFailure: an engine failure after the stream began reaches the OpenAI SDK
// as a stream error, never as a silently short answer.
func TestOpenAIMidStreamFailure(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{CutAfter: 3})
	defer vllm.Close()
	base := startGateway(t, strings.Replace(testConfig, "engines:\n", fmt.Sprintf("engines:\n  cut: {kind: openai, url: %q}\n", vllm.URL), 1)+"  cut: {engines: [cut]}\n")
	c := openAIClient(base)
	for _, model := range []string{"midstream", "cut"} {
		s := c.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: model,
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me a long story.")}})
		n := 0
		for s.Next() {
			n++
		}
		if err := s.Err(); err == nil {
			t.Errorf("%s: the stream ended without an error after %d chunks", model, n)
		} else {
			t.Logf("%s: %d chunks, then %v", model, n, err)
		}
	}
}

func TestOpenAIModels(t *testing.T) {
	c := openAIClient(startGateway(t, testConfig))
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range page.Data {
		found = found || (m.ID == "sim" && m.Object == "model" && m.OwnedBy != "")
	}
	if !found {
		t.Errorf("got %+v, want model sim", page.Data)
	}
	m, err := c.Models.Get(context.Background(), "sim")
	if err != nil || m.ID != "sim" {
		t.Errorf("got %+v %v", m, err)
	}
}

// TestClientDisconnectCancelsEngine measures, end to end, how long after an OpenAI client
// drops its stream the engine behind the gateway sees the cancel (the issue: within 100 ms).
func TestClientDisconnectCancelsEngine(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{HangAfter: 3})
	defer vllm.Close()
	base := startGateway(t, fmt.Sprintf("engines:\n  v: {kind: openai, url: %q}\nmodels:\n  v: {engines: [v]}\n", vllm.URL))
	c := openAIClient(base)
	ctx, cancel := context.WithCancel(context.Background())
	s := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "v",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	if !s.Next() {
		t.Fatalf("no first chunk: %v", s.Err())
	}
	t0 := time.Now()
	cancel()
	select {
	case at := <-vllm.Canceled:
		d := at.Sub(t0)
		t.Logf("client disconnect reached the engine in %v", d)
		if d > 100*time.Millisecond {
			t.Errorf("took %v, want under 100ms", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the engine never saw the disconnect")
	}
	s.Close()
}
