package openai

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func TestDecodeEmbeddings(t *testing.T) {
	tests := []struct {
		name, body string
		want       *llm.EmbedRequest
		base64     bool
		param      string // the field an error names
	}{
		{"string", `{"model":"m","input":"hi"}`, &llm.EmbedRequest{Model: "m", Input: []string{"hi"}}, false, ""},
		{"array, every option", `{"model":"m","input":["a","b"],"dimensions":8,"encoding_format":"base64","user":"u"}`,
			&llm.EmbedRequest{Model: "m", Input: []string{"a", "b"}, Dimensions: 8, User: "u"}, true, ""},
		{"no model", `{"input":"hi"}`, nil, false, "model"},
		{"no input", `{"model":"m"}`, nil, false, "input"},
		{"empty array", `{"model":"m","input":[]}`, nil, false, "input"},
		{"empty string in array", `{"model":"m","input":["a",""]}`, nil, false, "input[1]"},
		{"tokens", `{"model":"m","input":[1,2]}`, nil, false, "input[0]"},
		{"dimensions 0", `{"model":"m","input":"x","dimensions":0}`, nil, false, "dimensions"},
		{"unknown encoding", `{"model":"m","input":"x","encoding_format":"int8"}`, nil, false, "encoding_format"},
		{"duplicate key", `{"model":"m","input":"x","input":"y"}`, nil, false, "input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, b64, err := DecodeEmbeddings([]byte(tt.body))
			if tt.param != "" {
				e := apierr.From(err)
				if err == nil || e.Kind != apierr.InvalidRequest || e.Param != tt.param {
					t.Fatalf("got %v, want a 400 naming %s", err, tt.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || b64 != tt.base64 {
				t.Errorf("mismatch (-want +got):\n%s base64 %v, want %v", diff, b64, tt.base64)
			}
		})
	}
}

// An answer written in either encoding reads back as the same vectors.
func TestEmbeddingsRoundTrip(t *testing.T) {
	e := &llm.Embeddings{Model: "m", Vectors: [][]float32{{0.5, -0.25, 1e-7}, {0.6, 0.8}}, InputTokens: 7}
	for _, b64 := range []bool{false, true} {
		back, err := ReadEmbeddings(AppendEmbeddings(nil, e, "m", b64), 2)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(e, back); diff != "" {
			t.Errorf("base64 %v: mismatch (-want +got):\n%s", b64, diff)
		}
	}
	if _, err := ReadEmbeddings(AppendEmbeddings(nil, e, "m", false), 3); err == nil {
		t.Error("two vectors for three inputs: got no error")
	}
}
