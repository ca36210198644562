package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// Conversations for the pairing tests through the official SDKs.
func aUses(ids ...string) anthropic.MessageParam {
	blocks := []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock("Checking.")}
	for _, id := range ids {
		blocks = append(blocks, anthropic.NewToolUseBlock(id, map[string]any{"city": "Paris"}, "get_weather"))
	}
	return anthropic.NewAssistantMessage(blocks...)
}

func aResults(ids ...string) anthropic.MessageParam {
	var blocks []anthropic.ContentBlockParamUnion
	for _, id := range ids {
		blocks = append(blocks, anthropic.NewToolResultBlock(id, "18C", false))
	}
	return anthropic.NewUserMessage(blocks...)
}

var aAsk = anthropic.NewUserMessage(anthropic.NewTextBlock("Weather?"))

// TestAnthropicSDKToolPairing sends every pairing shape through the official Go SDK: the valid
// ones are served, the others are refused with a 400 invalid_request_error naming the message
// and the ids, as the Anthropic API does.
func TestAnthropicSDKToolPairing(t *testing.T) {
	c := anthropicClient(startGateway(t, testConfig))
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}}
	tests := []struct {
		name string
		msgs []anthropic.MessageParam
		want string // the start of the error message; "" when served
	}{
		{"answered", []anthropic.MessageParam{aAsk, aUses("toolu_a"), aResults("toolu_a")}, ""},
		{"parallel calls answered, then text",
			[]anthropic.MessageParam{aAsk, aUses("toolu_a", "toolu_b"), anthropic.NewUserMessage(
				anthropic.NewToolResultBlock("toolu_b", "20C", false), anthropic.NewToolResultBlock("toolu_a", "18C", false),
				anthropic.NewTextBlock("Which is warmer?"))}, ""},
		{"missing result", []anthropic.MessageParam{aAsk, aUses("toolu_a"), aAsk},
			"messages.1: tool_use ids were found without tool_result blocks immediately after: toolu_a."},
		{"orphan result", []anthropic.MessageParam{aAsk, anthropic.NewAssistantMessage(anthropic.NewTextBlock("Hi.")), aResults("toolu_a")},
			"messages.2.content.0: unexpected tool_use_id found in tool_result blocks: toolu_a."},
		{"result for the wrong id", []anthropic.MessageParam{aAsk, aUses("toolu_a"), aResults("toolu_b")},
			"messages.1: tool_use ids were found without tool_result blocks immediately after: toolu_a."},
		{"duplicate result", []anthropic.MessageParam{aAsk, aUses("toolu_a"), aResults("toolu_a", "toolu_a")},
			"messages.2.content.1: duplicate tool_result for tool_use_id toolu_a"},
		{"parallel calls, one result missing", []anthropic.MessageParam{aAsk, aUses("toolu_a", "toolu_b", "toolu_c"), aResults("toolu_a", "toolu_c")},
			"messages.1: tool_use ids were found without tool_result blocks immediately after: toolu_b."},
		{"results split across messages", []anthropic.MessageParam{aAsk, aUses("toolu_a", "toolu_b"), aResults("toolu_a"), aResults("toolu_b")},
			"messages.1: tool_use ids were found without tool_result blocks immediately after: toolu_b."},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := anthropic.MessageNewParams{Model: "sim", MaxTokens: 20, Tools: tools, Messages: tt.msgs}
			_, err := c.Messages.New(ctx, p)
			_, cerr := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "sim", Messages: tt.msgs,
				Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: tools[0].OfTool}}})
			for what, err := range map[string]error{"messages": err, "count_tokens": cerr} {
				if tt.want == "" {
					if err != nil {
						t.Errorf("%s: got %v, want an answer", what, err)
					}
					continue
				}
				var ae *anthropic.Error
				if !errors.As(err, &ae) {
					t.Fatalf("%s: got %v (%T), want *anthropic.Error", what, err, err)
				}
				if ae.StatusCode != 400 || ae.Type() != "invalid_request_error" {
					t.Errorf("%s: got %d %q, want 400 invalid_request_error", what, ae.StatusCode, ae.Type())
				}
				var body struct {
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(ae.RawJSON()), &body); err != nil {
					t.Fatalf("%s: error body %q: %v", what, ae.RawJSON(), err)
				}
				if msg := body.Error.Message; !strings.HasPrefix(msg, tt.want) {
					t.Errorf("%s: got message %q, want it to start %q", what, msg, tt.want)
				}
			}
		})
	}
}

func oUses(ids ...string) oai.ChatCompletionMessageParamUnion {
	a := oai.ChatCompletionAssistantMessageParam{}
	for _, id := range ids {
		a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
			ID: id, Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
	}
	return oai.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// TestOpenAISDKToolPairing sends every pairing shape through the official OpenAI Go SDK: the
// valid ones are served, the others are refused with a 400 whose param is the field's path.
func TestOpenAISDKToolPairing(t *testing.T) {
	c := openAIClient(startGateway(t, testConfig))
	ask, answer := oai.UserMessage("Weather?"), oai.AssistantMessage("Mild.")
	tool := func(id string) oai.ChatCompletionMessageParamUnion { return oai.ToolMessage("18C", id) }
	tests := []struct {
		name  string
		msgs  []oai.ChatCompletionMessageParamUnion
		param string // "" when served
		want  string // in the message
	}{
		{"answered", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a"), tool("call_a")}, "", ""},
		{"parallel calls answered out of order", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a", "call_b"), tool("call_b"), tool("call_a"), answer, ask}, "", ""},
		{"missing result", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a"), ask},
			"messages[1].tool_calls[0].id", "The following tool_call_ids did not have response messages: call_a"},
		{"orphan result", []oai.ChatCompletionMessageParamUnion{ask, answer, tool("call_a")},
			"messages[2].tool_call_id", "must be a response to a preceding message with 'tool_calls'"},
		{"result for the wrong id", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a"), tool("call_b")},
			"messages[2].tool_call_id", `no tool call of that message has id "call_b"`},
		{"duplicate result", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a"), tool("call_a"), tool("call_a")},
			"messages[3].tool_call_id", `duplicate tool message for tool_call_id "call_a"`},
		{"parallel calls, one result missing", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a", "call_b", "call_c"), tool("call_a"), tool("call_c"), answer},
			"messages[1].tool_calls[1].id", "did not have response messages: call_b"},
		{"results split across turns", []oai.ChatCompletionMessageParamUnion{ask, oUses("call_a", "call_b"), tool("call_a"), ask, tool("call_b")},
			"messages[1].tool_calls[1].id", "call_b"},
	}
	tools := []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
		Parameters: shared.FunctionParameters{"type": "object"}})}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "sim", Tools: tools, Messages: tt.msgs})
			if tt.param == "" {
				if err != nil {
					t.Fatalf("got %v, want an answer", err)
				}
				return
			}
			var e *oai.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *openai.Error", err, err)
			}
			if e.StatusCode != 400 || e.Type != "invalid_request_error" || e.Param != tt.param || e.Code != "" {
				t.Errorf("got %d type %q param %q code %q, want 400 invalid_request_error %q and no code",
					e.StatusCode, e.Type, e.Param, e.Code, tt.param)
			}
			if !strings.HasPrefix(e.Message, tt.param+": ") || !strings.Contains(e.Message, tt.want) {
				t.Errorf("got message %q, want it to name %q and say %q", e.Message, tt.param, tt.want)
			}
		})
	}
}

// TestOpenAISDKOwnErrors checks the errors layer0 itself writes (not an engine's) as the
// official OpenAI SDK sees them: a rate limit of requests and of tokens, a missing and a wrong
// key, a model the key may not use, and an unknown model.
func TestOpenAISDKOwnErrors(t *testing.T) {
	const text = `
keys:
  - {name: few, hash: %s, limits: {requests_per_minute: 1}, models: [m]}
  - {name: small, hash: %s, limits: {input_tokens_per_minute: 5}}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
  n: {engines: [sim]}
`
	base := startGateway(t, fmt.Sprintf(text, authHash("l0-few"), authHash("l0-small")))
	client := func(key string) oai.Client {
		return oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(key), oaiopt.WithMaxRetries(0))
	}
	ctx := context.Background()
	chat := func(c oai.Client, model, prompt string) error {
		_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: model, MaxTokens: oai.Int(2),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt)}})
		return err
	}
	few, small := client("l0-few"), client("l0-small")
	modelErr := func(c oai.Client, id string) error {
		_, err := c.Models.Get(ctx, id)
		return err
	}
	if err := chat(few, "m", "hi"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		err              error
		status           int
		typ, code, param string
	}{
		{"requests per minute", chat(few, "m", "hi"), 429, "requests", "rate_limit_exceeded", ""},
		{"input tokens per minute", chat(small, "m", strings.Repeat("many words here ", 20)), 429, "tokens", "rate_limit_exceeded", ""},
		{"wrong key", chat(client("l0-wrong"), "m", "hi"), 401, "invalid_request_error", "invalid_api_key", ""},
		{"model not allowed", chat(few, "n", "hi"), 403, "invalid_request_error", "model_not_found", "model"},
		{"unknown model", chat(small, "nope", "hi"), 404, "invalid_request_error", "model_not_found", "model"},
		{"unknown model by id", modelErr(small, "nope"), 404, "invalid_request_error", "model_not_found", "model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *oai.Error
			if !errors.As(tt.err, &e) {
				t.Fatalf("got %v (%T), want *openai.Error", tt.err, tt.err)
			}
			if e.StatusCode != tt.status || e.Type != tt.typ || e.Code != tt.code || e.Param != tt.param || e.Message == "" {
				t.Errorf("got %d type %q code %q param %q message %q, want %d %q %q %q",
					e.StatusCode, e.Type, e.Code, e.Param, e.Message, tt.status, tt.typ, tt.code, tt.param)
			}
		})
	}
	// The Anthropic SDK sees the same refusals with the Anthropic API's types.
	ac := anthropicClient(base, option.WithAPIKey("l0-few"))
	_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 2, Messages: userText("hi")})
	assertAPIError(t, err, 429, "rate_limit_error")
	_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "n", MaxTokens: 2, Messages: userText("hi")})
	assertAPIError(t, err, 403, "permission_error")
}
