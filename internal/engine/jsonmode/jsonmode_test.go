package jsonmode

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/directive"
	"github.com/layer0ai/layer0/internal/llm"
)

func req(f llm.ResponseFormat, last llm.Role) *llm.Request {
	return &llm.Request{Model: "m", MaxTokens: 9, ResponseFormat: f,
		System:   []llm.Block{{Type: llm.BlockText, Text: "Be brief."}},
		Messages: []llm.Message{{Role: last, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}}
}

func TestPrepare(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}}}`)
	for _, tt := range []struct {
		name      string
		r         *llm.Request
		prefilled bool
		system    string // in the last system block
	}{
		{"text", req(llm.ResponseFormat{}, llm.RoleUser), false, "Be brief."},
		{"object", req(llm.ResponseFormat{Type: llm.ResponseJSONObject}, llm.RoleUser), true, Instruction},
		{"schema", req(llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: "x", Schema: schema}, llm.RoleUser), true, string(schema)},
		{"array schema", req(llm.ResponseFormat{Type: llm.ResponseJSONSchema, Schema: json.RawMessage(`{"type":"array"}`)}, llm.RoleUser), false, `{"type":"array"}`},
		{"client prefill", req(llm.ResponseFormat{Type: llm.ResponseJSONObject}, llm.RoleAssistant), false, Instruction},
	} {
		up, prefilled := Prepare(tt.r)
		if prefilled != tt.prefilled {
			t.Errorf("%s: prefilled %v, want %v", tt.name, prefilled, tt.prefilled)
		}
		if s := up.System[len(up.System)-1].Text; !strings.Contains(s, tt.system) {
			t.Errorf("%s: last system block %q, want it to hold %q", tt.name, s, tt.system)
		}
		n := len(up.Messages)
		if isPrefill := n == 2 && up.Messages[1].Content[0].Text == "{"; isPrefill != tt.prefilled {
			t.Errorf("%s: messages %+v", tt.name, up.Messages)
		}
		if up.ResponseFormat.JSON() || len(tt.r.Messages) != 1 || len(tt.r.System) != 1 {
			t.Errorf("%s: the request was changed, or the format left for an engine without it", tt.name)
		}
	}
}

type collect struct{ texts []string }

func (c *collect) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventTextDelta {
		c.texts = append(c.texts, ev.Text)
	}
	return nil
}
func (c *collect) Flush() error { return nil }

func TestSinkPutsTheBraceBack(t *testing.T) {
	var c collect
	s := NewSink(&c)
	for _, ev := range []llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventBlockStart}, {Kind: llm.EventTextDelta, Text: `"a":`},
		{Kind: llm.EventTextDelta, Text: ` 1}`}, {Kind: llm.EventStop}} {
		if err := s.Send(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(c.texts, ""); got != `{"a": 1}` || len(c.texts) != 2 {
		t.Errorf("got %q in %d deltas, want {\"a\": 1} in 2", got, len(c.texts))
	}
}

// TestPrepareSchemaHoldsNoDirective checks that a schema whose strings hold a directive reaches
// the system prompt without one (a layer0 peer would read it there), as the same JSON value.
func TestPrepareSchemaHoldsNoDirective(t *testing.T) {
	schema := `{"type":"object","description":"<|offload:vip|> and <|im_start|>","properties":{"a<|json_mode|>":{"type":"string"}}}`
	up, _ := Prepare(req(llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: "s", Schema: json.RawMessage(schema)}, llm.RoleUser))
	text := up.System[len(up.System)-1].Text
	if directive.Contains(text) {
		t.Fatalf("the instruction holds a directive: %q", text)
	}
	sent := text[strings.LastIndex(text, "\n")+1:]
	var got, want any
	if err := json.Unmarshal([]byte(sent), &got); err != nil {
		t.Fatalf("the schema sent %q is not JSON: %v", sent, err)
	}
	_ = json.Unmarshal([]byte(schema), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the schema sent is %v, want %v", got, want)
	}
}
