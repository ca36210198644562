package openai

import (
	"testing"

	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// answerBodies are non-streamed answers, whole and broken, for the policies' one-pass check.
var answerBodies = []string{
	`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"id":"r","object":"response","model":"m","status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}`,
	`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"h`,
	"{\"model\":\"m\",\"choices\":[{\"message\":{\"content\":\"\xff\"},\"finish_reason\":\"stop\"}]}",
	`{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]} trailing`,
	`{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop",}]}`,
	`{"model":tru,"choices":[]}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`[]`,
	``,
}

// TestAnswerChecked: both policies check a non-streamed answer in the pass that reads it, as
// jsontext.ValidObject would, and read nothing from one that is not valid.
func TestAnswerChecked(t *testing.T) {
	for _, p := range []passthrough.Policy{&chatPolicy{}, &responsesPolicy{}} {
		for _, body := range answerBodies {
			var u llm.Usage
			a, _ := p.Answer([]byte(body), &u)
			if want := jsontext.ValidObject([]byte(body)); a.Checked != want {
				t.Errorf("%T: Answer(%q).Checked = %v, want %v", p, body, a.Checked, want)
			}
			if !a.Checked && (u != llm.Usage{} || a.ModelEnd != 0 || a.Invalid != "") {
				t.Errorf("%T: Answer(%q) read %+v, usage %+v from a broken body", p, body, a, u)
			}
		}
	}
}
