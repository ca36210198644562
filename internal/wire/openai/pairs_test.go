package openai_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// Pieces of Chat Completions messages for the pairing tests.
const (
	pUser  = `{"role":"user","content":"Weather in Paris and Lyon?"}`
	pCalls = `{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Lyon\"}"}}]}`
	pCallA  = `{"role":"assistant","content":"","tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}`
	pToolA  = `{"role":"tool","tool_call_id":"call_a","content":"18C"}`
	pToolB  = `{"role":"tool","tool_call_id":"call_b","content":"20C"}`
	pToolX  = `{"role":"tool","tool_call_id":"call_x","content":"?"}`
	pText   = `{"role":"assistant","content":"Both are mild."}`
	pSystem = `{"role":"system","content":"Be brief."}`
)

func chat(msgs ...string) string {
	return `{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],` +
		`"messages":[` + strings.Join(msgs, ",") + `]}`
}

// TestDecodeRequestToolPairs covers every way tool calls and tool messages can fail to pair up
// in OpenAI's format, with the field named as OpenAI spells it.
func TestDecodeRequestToolPairs(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		param  string // "" when valid
		substr string
	}{
		{name: "parallel calls answered", body: chat(pUser, pCalls, pToolA, pToolB, pText)},
		{name: "parallel calls answered out of order", body: chat(pUser, pCalls, pToolB, pToolA)},
		{name: "answered, then a user turn", body: chat(pUser, pCalls, pToolA, pToolB, `{"role":"user","content":"and Nice?"}`)},
		{name: "system message between call and results", body: chat(pUser, pCallA, pSystem, pToolA)},

		{name: "missing result: call is last", body: chat(pUser, pCallA),
			param: "messages[1].tool_calls[0].id", substr: "did not have response messages: call_a"},
		{name: "missing result: user message next", body: chat(pUser, pCallA, pUser),
			param: "messages[1].tool_calls[0].id", substr: "call_a"},
		{name: "orphan result: no call before", body: chat(pUser, pToolA),
			param: "messages[1].tool_call_id", substr: "must be a response to a preceding message with 'tool_calls'"},
		{name: "orphan result: after a text answer", body: chat(pUser, pCallA, pToolA, pText, pToolA),
			param: "messages[4].tool_call_id", substr: "call_a"},
		{name: "result for the wrong id", body: chat(pUser, pCallA, pToolX),
			param: "messages[2].tool_call_id", substr: `no tool call of that message has id "call_x"`},
		{name: "duplicate result", body: chat(pUser, pCallA, pToolA, pToolA),
			param: "messages[3].tool_call_id", substr: "duplicate tool message for tool_call_id \"call_a\": messages[2]"},
		{name: "parallel calls, one result missing", body: chat(pUser, pCalls, pToolA, pText),
			param: "messages[1].tool_calls[1].id", substr: "did not have response messages: call_b"},
		{name: "results split across turns", body: chat(pUser, pCalls, pToolA, pUser, pToolB),
			param: "messages[1].tool_calls[1].id", substr: "call_b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := openai.DecodeRequest([]byte(tt.body))
			if tt.param == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *apierr.Error", err)
			}
			if e.Kind != apierr.InvalidRequest || e.Param != tt.param {
				t.Errorf("got kind %v param %q, want invalid_request_error about %q (%s)", e.Kind, e.Param, tt.param, e.Message)
			}
			if !strings.HasPrefix(e.Message, tt.param+": ") || !strings.Contains(e.Message, tt.substr) {
				t.Errorf("got message %q, want it to start with %q and say %q", e.Message, tt.param+": ", tt.substr)
			}
		})
	}
}

// TestToolPairsTranslation carries a conversation with parallel tool calls across both formats
// and back: one tool message per call id, in order, and the same canonical request at the end.
func TestToolPairsTranslation(t *testing.T) {
	anth := `{"model":"m","max_tokens":64,` +
		`"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[` +
		`{"role":"user","content":"Weather in Paris, Lyon and Nice?"},` +
		`{"role":"assistant","content":[{"type":"text","text":"Checking."},` +
		`{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris"}},` +
		`{"type":"tool_use","id":"toolu_02","name":"get_weather","input":{"city":"Lyon"}},` +
		`{"type":"tool_use","id":"toolu_03","name":"get_weather","input":{"city":"Nice"}}]},` +
		`{"role":"user","content":[` +
		`{"type":"tool_result","tool_use_id":"toolu_01","content":"18C"},` +
		`{"type":"tool_result","tool_use_id":"toolu_02","content":"20C"},` +
		`{"type":"tool_result","tool_use_id":"toolu_03","content":"22C"},` +
		`{"type":"text","text":"Which is warmest?"}]}]}`
	fromAnth, err := anthropic.DecodeRequest([]byte(anth))
	if err != nil {
		t.Fatal(err)
	}

	// Anthropic → OpenAI: one tool message per call id, in order, before the rest of the turn.
	body := openai.AppendRequest(nil, fromAnth)
	var sent struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	var shape []string
	for _, m := range sent.Messages {
		s := m.Role
		for _, c := range m.ToolCalls {
			s += " " + c.ID
		}
		if m.ToolCallID != "" {
			s += " " + m.ToolCallID
		}
		shape = append(shape, s)
	}
	want := []string{"user", "assistant call_01 call_02 call_03", "tool call_01", "tool call_02", "tool call_03", "user"}
	if diff := cmp.Diff(want, shape); diff != "" {
		t.Errorf("OpenAI messages (-want +got):\n%s\nbody %s", diff, body)
	}

	// OpenAI → canonical: the same conversation, ids as the OpenAI client sent them.
	fromOpenAI, err := openai.DecodeRequest(body)
	if err != nil {
		t.Fatalf("decoding the OpenAI form: %v\n%s", err, body)
	}
	if len(fromOpenAI.Messages) != 3 {
		t.Fatalf("got %d canonical messages, want 3", len(fromOpenAI.Messages))
	}
	for j, b := range fromOpenAI.Messages[2].Content[:3] {
		if id := fromOpenAI.Messages[1].Content[j+1].ID; b.Type != llm.BlockToolResult || b.ToolUseID != id {
			t.Errorf("result %d: got %v for %q, want a tool_result for %q", j, b.Type, b.ToolUseID, id)
		}
	}

	// And back to Anthropic's format: the engine side of an OpenAI client's request.
	back, err := anthropic.DecodeRequest(anthropic.AppendRequest(nil, fromOpenAI))
	if err != nil {
		t.Fatalf("decoding the Anthropic form of the OpenAI request: %v", err)
	}
	back.Format = llm.FormatOpenAI
	if diff := cmp.Diff(fromOpenAI, back); diff != "" {
		t.Errorf("OpenAI → Anthropic round trip (-want +got):\n%s", diff)
	}

	// An OpenAI client's parallel calls reach an Anthropic engine paired in one user message.
	oa, err := openai.DecodeRequest([]byte(chat(pUser, pCalls, pToolB, pToolA, pText)))
	if err != nil {
		t.Fatal(err)
	}
	oa.MaxTokens = 64 // optional in OpenAI's format, required in Anthropic's
	if _, err := anthropic.DecodeRequest(anthropic.AppendRequest(nil, oa)); err != nil {
		t.Errorf("an OpenAI conversation with parallel calls answered out of order does not pair in Anthropic's format: %v", err)
	}
}
