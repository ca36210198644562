package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func TestResponseFormatRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		format string // the client's response_format
		want   llm.ResponseFormat
		sent   string // what an engine gets; "" for nothing
	}{
		{`{"type":"text"}`, llm.ResponseFormat{}, ""},
		{`{"type":"json_object"}`, llm.ResponseFormat{Type: llm.ResponseJSONObject}, `{"type":"json_object"}`},
		{`{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":{"type":"object"}}}`,
			llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: "w", Strict: true, Schema: json.RawMessage(`{"type":"object"}`)},
			`{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object"},"strict":true}}`},
	} {
		r, err := DecodeRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":` + tt.format + `}`))
		if err != nil {
			t.Fatalf("%s: %v", tt.format, err)
		}
		if f := r.ResponseFormat; f.Type != tt.want.Type || f.Name != tt.want.Name || f.Strict != tt.want.Strict || string(f.Schema) != string(tt.want.Schema) {
			t.Errorf("%s: decoded %+v, want %+v", tt.format, f, tt.want)
		}
		body := string(AppendRequest(nil, r))
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("%s: the engine's body is not JSON: %v", tt.format, err)
		}
		if got := string(m["response_format"]); got != tt.sent {
			t.Errorf("%s: sent %s, want %s", tt.format, got, tt.sent)
		}
	}
}

func TestResponseFormatErrors(t *testing.T) {
	for format, param := range map[string]string{
		`"json"`:                 "response_format",
		`{}`:                     "response_format.type",
		`{"type":"xml"}`:         "response_format.type",
		`{"type":"json_schema"}`: "response_format.json_schema",
		`{"type":"json_schema","json_schema":{"schema":{}}}`:             "response_format.json_schema.name",
		`{"type":"json_schema","json_schema":{"name":"x","schema":[1]}}`: "response_format.json_schema.schema",
	} {
		_, err := DecodeRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":` + format + `}`))
		var e *apierr.Error
		if !errors.As(err, &e) || e.Param != param || !strings.Contains(e.Error(), param) && e.Param == "" {
			t.Errorf("%s: got %v, want a 400 on %s", format, err, param)
		}
	}
}
