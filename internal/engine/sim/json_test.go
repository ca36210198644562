package sim

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

func TestJSONMode(t *testing.T) {
	e := newEngine(t, config.Sim{})
	schema := json.RawMessage(`{"type":"object","required":["id","scores","kind"],"properties":{
		"id":{"type":"string","format":"uuid"},"scores":{"type":"array","items":{"type":"number","minimum":0,"maximum":1},"minItems":2},
		"kind":{"enum":["a","b"]},"note":{"type":["string","null"]}}}`)
	for i := range 20 {
		for _, f := range []llm.ResponseFormat{{Type: llm.ResponseJSONObject}, {Type: llm.ResponseJSONSchema, Name: "s", Schema: schema}} {
			req := userReq("question " + strconv.Itoa(i))
			req.ResponseFormat = f
			rec := &recorder{t: t}
			if err := e.Generate(context.Background(), req, rec); err != nil {
				t.Fatal(err)
			}
			rec.checkOrder()
			text := rec.coll.Response.Content[0].Text
			var v struct {
				Answer *string   `json:"answer"`
				ID     *string   `json:"id"`
				Scores []float64 `json:"scores"`
				Kind   string    `json:"kind"`
			}
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				t.Fatalf("%s: %q is not JSON: %v", f.Type, text, err)
			}
			if f.Type == llm.ResponseJSONObject && v.Answer == nil {
				t.Errorf("json_object: %q has no answer", text)
			}
			// The answer is at least its 24 characters of words, not words padded with x.
			if v.Answer != nil && (len(*v.Answer) < 24 || strings.Contains(*v.Answer, "xx")) {
				t.Errorf("json_object: answer %q, want 24 characters or more of words", *v.Answer)
			}
			if f.Type == llm.ResponseJSONSchema && (v.ID == nil || len(v.Scores) < 2 || v.Kind != "a" && v.Kind != "b") {
				t.Errorf("json_schema: %q does not follow the schema", text)
			}
			for _, s := range v.Scores {
				if s < 0 || s > 1 {
					t.Errorf("score %v out of [0, 1] in %q", s, text)
				}
			}
			if rec.coll.Response.Stop != llm.StopEndTurn || rec.coll.Response.Usage.OutputTokens == 0 {
				t.Errorf("stop %v usage %+v", rec.coll.Response.Stop, rec.coll.Response.Usage)
			}
		}
	}
	// max_tokens cuts a JSON answer as it cuts text.
	req := userReq("q")
	req.ResponseFormat, req.MaxTokens = llm.ResponseFormat{Type: llm.ResponseJSONSchema, Schema: schema}, 3
	rec := &recorder{t: t}
	if err := e.Generate(context.Background(), req, rec); err != nil {
		t.Fatal(err)
	}
	if r := rec.coll.Response; r.Stop != llm.StopMaxTokens || r.Usage.OutputTokens != 3 {
		t.Errorf("max_tokens 3: stop %v, %d tokens", r.Stop, r.Usage.OutputTokens)
	}
}
