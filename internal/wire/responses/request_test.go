package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func text(s string) llm.Block { return llm.Block{Type: llm.BlockText, Text: s} }

func f64(v float64) *float64 { return &v }

func TestDecodeRequest(t *testing.T) {
	history := &History{System: []llm.Block{text("earlier system")},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("earlier")}},
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "call_1", Name: "f", Input: json.RawMessage(`{}`)}}}}}
	lookup := func(id string) (*History, error) {
		if id != "resp_1" {
			return nil, apierr.New(apierr.NotFound, "no")
		}
		return history, nil
	}
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)
	tests := []struct {
		name string
		body string
		want *llm.Request
	}{
		{"string input", `{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":50,"temperature":0.5}`,
			&llm.Request{Model: "m", System: []llm.Block{text("be brief")}, MaxTokens: 50, Temperature: f64(0.5),
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("hi")}}}}},
		{"items", `{"model":"m","stream":true,"input":[
			{"type":"message","role":"developer","content":[{"type":"input_text","text":"dev"}]},
			{"role":"user","content":"a"},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"b"}]},
			{"type":"reasoning","summary":[],"encrypted_content":"x"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"c"}]},
			{"type":"function_call","call_id":"call_9","name":"f","arguments":"{\"x\":1}"},
			{"type":"function_call_output","call_id":"call_9","output":"done"},
			{"role":"user","content":"d"}],
			"tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}],
			"tool_choice":"required","parallel_tool_calls":false}`,
			&llm.Request{Model: "m", Stream: true, System: []llm.Block{text("dev")}, Ignored: "tools[1]",
				Tools:      []llm.Tool{{Name: "f", InputSchema: json.RawMessage(`{"type":"object"}`)}},
				ToolChoice: llm.ToolChoice{Type: llm.ToolAny, DisableParallelToolUse: true},
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: []llm.Block{text("a"), text("b")}},
					{Role: llm.RoleAssistant, Content: []llm.Block{text("c"), {Type: llm.BlockToolUse, ID: "call_9", Name: "f", Input: json.RawMessage(`{"x":1}`)}}},
					{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "call_9", Content: []llm.Block{text("done")}}, text("d")}},
				}}},
		{"namespace and named choice", `{"model":"m","input":"hi","tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]}],
			"tool_choice":{"type":"function","name":"g"}}`,
			&llm.Request{Model: "m", Tools: []llm.Tool{{Name: "g", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}},
				ToolChoice: llm.ToolChoice{Type: llm.ToolNamed, Name: "g"},
				Messages:   []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("hi")}}}}},
		{"reasoning ignored", `{"model":"m","input":"hi","reasoning":{"effort":"high"}}`,
			&llm.Request{Model: "m", Ignored: "reasoning", Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("hi")}}}}},
		{"json schema", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}}}`,
			&llm.Request{Model: "m", ResponseFormat: llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: "w", Schema: schema, Strict: true},
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("hi")}}}}},
		{"previous response", `{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"ok"}]}]}`,
			&llm.Request{Model: "m", System: []llm.Block{text("earlier system")}, Messages: []llm.Message{
				history.Messages[0], history.Messages[1],
				{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "call_1", Content: []llm.Block{text("ok")}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := DecodeRequest([]byte(tt.body), lookup)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Format = llm.FormatResponses
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeRequestExtras(t *testing.T) {
	_, x, err := DecodeRequest([]byte(`{"model":"m","input":"hi","store":false,"user":"u","metadata":{"a":"b"},
		"tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if x.Store || x.User != "u" || string(x.Metadata) != `{"a":"b"}` || x.Namespaces["g"] != "ns" || !x.ParallelToolCalls {
		t.Errorf("got %+v", x)
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	tests := []struct {
		name, body, param string
		kind              apierr.Kind
	}{
		{"not json", `{`, "", apierr.InvalidRequest},
		{"no model", `{"input":"hi"}`, "model", apierr.InvalidRequest},
		{"no input", `{"model":"m"}`, "input", apierr.InvalidRequest},
		{"empty input", `{"model":"m","input":""}`, "input", apierr.InvalidRequest},
		{"bad item", `{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, "input[0].type", apierr.InvalidRequest},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role", apierr.InvalidRequest},
		{"bad part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type", apierr.InvalidRequest},
		{"image data URL not base64", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,!!!"}]}]}`, "input[0].content[0].image_url", apierr.InvalidRequest},
		{"image file URL", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"file:///etc/passwd"}]}]}`, "input[0].content[0].image_url", apierr.InvalidRequest},
		{"metadata too many pairs", `{"model":"m","input":"hi","metadata":{"k0": "v", "k1": "v", "k2": "v", "k3": "v", "k4": "v", "k5": "v", "k6": "v", "k7": "v", "k8": "v", "k9": "v", "k10": "v", "k11": "v", "k12": "v", "k13": "v", "k14": "v", "k15": "v", "k16": "v"}}`, "metadata", apierr.InvalidRequest},
		{"metadata long key", `{"model":"m","input":"hi","metadata":{"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk": "v"}}`, "metadata", apierr.InvalidRequest},
		{"metadata long value", `{"model":"m","input":"hi","metadata":{"a": "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}}`, "metadata", apierr.InvalidRequest},
		{"metadata number value", `{"model":"m","input":"hi","metadata":{"a":1}}`, "metadata", apierr.InvalidRequest},
		{"metadata nested value", `{"model":"m","input":"hi","metadata":{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`, "metadata", apierr.InvalidRequest},
		{"metadata array", `{"model":"m","input":"hi","metadata":["a"]}`, "metadata", apierr.InvalidRequest},
		{"metadata string", `{"model":"m","input":"hi","metadata":"a"}`, "metadata", apierr.InvalidRequest},
		{"bad arguments", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}]}`, "input[0].arguments", apierr.InvalidRequest},
		{"unpaired output", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"c","output":"o"}]}`, "input", apierr.InvalidRequest},
		{"temperature", `{"model":"m","input":"hi","temperature":2.5}`, "temperature", apierr.InvalidRequest},
		{"max_output_tokens", `{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens", apierr.InvalidRequest},
		{"format", `{"model":"m","input":"hi","text":{"format":{"type":"xml"}}}`, "text.format.type", apierr.InvalidRequest},
		{"schema name", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name", apierr.InvalidRequest},
		{"tool name", `{"model":"m","input":"hi","tools":[{"type":"function","name":"a b"}]}`, "tools[0].name", apierr.InvalidRequest},
		{"choice", `{"model":"m","input":"hi","tool_choice":{"type":"function","name":"nope"}}`, "tool_choice.name", apierr.InvalidRequest},
		{"background", `{"model":"m","input":"hi","background":true}`, "background", apierr.InvalidRequest},
		{"previous without store", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", apierr.InvalidRequest},
		{"duplicate key", `{"model":"m","input":"hi","input":"again"}`, "input", apierr.InvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := DecodeRequest([]byte(tt.body), nil)
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *apierr.Error", err)
			}
			if e.Kind != tt.kind || e.Param != tt.param {
				t.Errorf("got kind %v param %q (%s), want %v %q", e.Kind, e.Param, e.Message, tt.kind, tt.param)
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}]}`,
		`{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"n","schema":{}}},"previous_response_id":"resp_1"}`,
	} {
		f.Add([]byte(s))
	}
	lookup := func(string) (*History, error) {
		return &History{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("x")}}}}, nil
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, x, err := DecodeRequest(body, lookup)
		// In a buffer of its own, as the server decodes in place, body reads the same; once the
		// buffer is reused, what outlives the request — the model, the user, the ignored
		// field's name, previous_response_id, the error's message — still says what it did.
		buf := bytes.Clone(body)
		ri, xi, erri := DecodeRequestText(unsafe.String(unsafe.SliceData(buf), len(buf)), lookup)
		if (err == nil) != (erri == nil) {
			t.Fatalf("in place: %v, in a copy: %v", erri, err)
		}
		for i := range buf {
			buf[i] = '#'
		}
		switch {
		case err != nil && erri.Error() != err.Error():
			t.Fatalf("once the buffer is reused the error says %q, not %q", erri, err)
		case err == nil && (ri.Model != r.Model || ri.UserID != r.UserID || ri.Ignored != r.Ignored ||
			xi.User != x.User || xi.PreviousResponseID != x.PreviousResponseID):
			t.Fatalf("once the buffer is reused: %q %q %q %q %q, want %q %q %q %q %q", ri.Model, ri.UserID, ri.Ignored, xi.User,
				xi.PreviousResponseID, r.Model, r.UserID, r.Ignored, x.User, x.PreviousResponseID)
		}
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Status() != 400 {
				t.Fatalf("got %v, want a 400 *apierr.Error", err)
			}
			return
		}
		if r == nil || x == nil || r.Validate() != nil {
			t.Fatalf("accepted an invalid request: %+v", r)
		}
	})
}
