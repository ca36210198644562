package anthropic

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream/fake"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// TestAnswerChecked: the policy checks a non-streamed answer in the pass that reads it, as
// jsontext.ValidObject would, and reads nothing from one that is not valid.
func TestAnswerChecked(t *testing.T) {
	for _, body := range []string{
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"id":"msg_1","type":"message","model":"m","content":[{"type":"text","text":"h`,
		"{\"type\":\"message\",\"model\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}],\"usage\":{\"output_tokens\":2}}",
		`{"type":"message","model":"m","usage":{"output_tokens":2}} {}`,
		`{"type":"message","model":"m","usage":{"output_tokens":2},}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"busy"`,
		`[]`,
		``,
	} {
		var u llm.Usage
		a, err := (&policy{}).Answer([]byte(body), &u)
		if want := jsontext.ValidObject([]byte(body)); a.Checked != (want && err == nil) {
			t.Errorf("Answer(%q).Checked = %v (error %v), ValidObject %v", body, a.Checked, err, want)
		}
		if !jsontext.ValidObject([]byte(body)) && (err != nil || u != llm.Usage{} || a.ModelEnd != 0) {
			t.Errorf("Answer(%q) read %+v, usage %+v, error %v from a broken body", body, a, u, err)
		}
	}
}

// BenchmarkForwardAnswer: the gateway's own work on a non-streamed 100-token answer passed
// through — check it, read its usage, rename the model, copy it to the client.
func BenchmarkForwardAnswer(b *testing.B) {
	body := []byte(`{"id":"msg_01","type":"message","role":"assistant","model":"engine-model","content":[{"type":"text","text":"` +
		strings.Repeat("token ", 100) + `"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":100}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	r := bytes.NewReader(body)
	for b.Loop() {
		r.Reset(body)
		src := passthrough.Source{Body: r, ContentType: "application/json", ClientModel: "bench"}
		res, err := passthrough.Forward(&policy{}, &src, fake.Writer(io.Discard))
		if err != nil || res.Usage.OutputTokens != 100 {
			b.Fatalf("forward: %+v, %v", res.Usage, err)
		}
	}
}
