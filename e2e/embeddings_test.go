package e2e

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// embeddingsGateway serves embeddings on the sim (cached), on a fake vLLM, and a model on an
// Anthropic engine, which does not embed; the key "l0-embed-small" may send 40 input tokens a
// minute.
func embeddingsGateway(t *testing.T) (base string, vllm *fake.Server) {
	t.Helper()
	vllm = fake.NewOpenAI(fake.Script{})
	claude := fake.NewAnthropic(fake.Script{})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	base = startGateway(t, fmt.Sprintf(`
keys:
  - {name: big, hash: %s}
  - {name: small, hash: %s, limits: {input_tokens_per_minute: 40}}
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: %q}
  claude: {kind: anthropic, url: %q}
models:
  sim: {engines: [sim], cache: {enabled: true}}
  vllm: {engines: [vllm]}
  claude: {engines: [claude]}
`, authHash("test-key"), authHash("l0-embed-small"), vllm.URL, claude.URL))
	return base, vllm
}

func TestEmbeddingsSDK(t *testing.T) {
	base, vllm := embeddingsGateway(t)
	c := openAIClient(base)
	ctx := context.Background()

	// One string on the sim: a unit vector of the default length, the same for the same text.
	one := func(text string, dims int64) []float64 {
		t.Helper()
		p := oai.EmbeddingNewParams{Model: "sim", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String(text)}}
		if dims > 0 {
			p.Dimensions = oai.Int(dims)
		}
		r, err := c.Embeddings.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Data) != 1 || r.Model != "sim" || r.Usage.PromptTokens == 0 || r.Usage.TotalTokens != r.Usage.PromptTokens {
			t.Fatalf("got %d vectors, model %q, usage %+v; want one, sim, the input's tokens", len(r.Data), r.Model, r.Usage)
		}
		return r.Data[0].Embedding
	}
	a := one("the quick brown fox", 0)
	if len(a) != 256 || math.Abs(norm(a)-1) > 1e-5 {
		t.Errorf("got %d numbers of length %g, want 256 of length 1", len(a), norm(a))
	}
	if b := one("the quick brown fox", 0); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same text embedded differently")
	}
	if b := one("a slow green turtle", 0); fmt.Sprint(a) == fmt.Sprint(b) {
		t.Error("two texts embedded the same")
	}
	if d := one("the quick brown fox", 8); len(d) != 8 || math.Abs(norm(d)-1) > 1e-5 {
		t.Errorf("dimensions 8: got %d numbers of length %g", len(d), norm(d))
	}

	// An array, as base64: the same vectors as floats, in order.
	r, err := c.Embeddings.New(ctx, oai.EmbeddingNewParams{Model: "sim", Dimensions: oai.Int(16),
		Input:          oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta"}},
		EncodingFormat: oai.EmbeddingNewParamsEncodingFormatBase64})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Data) != 2 {
		t.Fatalf("got %d vectors for 2 inputs", len(r.Data))
	}
	for i, text := range []string{"alpha", "beta"} {
		var s string
		if err := json.Unmarshal([]byte(r.Data[i].JSON.Embedding.Raw()), &s); err != nil {
			t.Fatalf("vector %d is not a base64 string: %s", i, r.Data[i].JSON.Embedding.Raw())
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != 16*4 {
			t.Fatalf("vector %d: %d bytes, %v; want 64", i, len(raw), err)
		}
		want := one(text, 16)
		for j := range want {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])); got != float32(want[j]) {
				t.Fatalf("vector %d number %d: base64 %g, float %g", i, j, got, want[j])
			}
		}
	}

	// Through an openai engine: the engine's own vectors, in order.
	r, err = c.Embeddings.New(ctx, oai.EmbeddingNewParams{Model: "vllm", Dimensions: oai.Int(3),
		Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"abcd", "ef"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Data) != 2 || fmt.Sprint(r.Data[0].Embedding, r.Data[1].Embedding) != "[4 0 1] [2 1 1]" || r.Model != "vllm" {
		t.Errorf("got %+v", r.Data)
	}
	got := last(t, vllm)
	if got.URL != "/v1/embeddings" || !strings.Contains(string(got.Body), `"input":["abcd","ef"]`) || !strings.Contains(string(got.Body), `"dimensions":3`) {
		t.Errorf("engine got %s %s", got.URL, got.Body)
	}
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

// TestEmbeddingsCacheLimitsErrors: the exact cache answers a repeated request, the input counts
// against the key's token limit, and errors come in OpenAI's shape.
func TestEmbeddingsCacheLimitsErrors(t *testing.T) {
	base, _ := embeddingsGateway(t)
	ctx := context.Background()
	post := func(key, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/embeddings", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	body := `{"model":"sim","input":["cache me","and me"],"dimensions":4}`
	if h := post("test-key", body).Header.Get("X-Cache"); h != "MISS" {
		t.Errorf("first request: X-Cache %q, want MISS", h)
	}
	if h := post("test-key", body).Header.Get("X-Cache"); h != "HIT" {
		t.Errorf("same request again: X-Cache %q, want HIT", h)
	}

	// 40 input tokens a minute: a long input is refused before any engine runs.
	long := `{"model":"vllm","input":"` + strings.Repeat("word ", 200) + `"}`
	if st := post("l0-embed-small", long).StatusCode; st != http.StatusTooManyRequests {
		t.Errorf("an input over the key's tokens per minute: status %d, want 429", st)
	}

	small := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0))
	tests := []struct {
		name   string
		params oai.EmbeddingNewParams
		status int
		param  string
	}{
		{"empty input", oai.EmbeddingNewParams{Model: "sim", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("")}}, 400, "input"},
		{"token arrays", oai.EmbeddingNewParams{Model: "sim", Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1, 2}}}}, 400, "input[0]"},
		{"unknown model", oai.EmbeddingNewParams{Model: "nope", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("x")}}, 404, "model"},
		{"an engine that does not embed", oai.EmbeddingNewParams{Model: "claude", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("x")}}, 400, "model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := small.Embeddings.New(ctx, tt.params)
			var e *oai.Error
			if !errors.As(err, &e) || e.StatusCode != tt.status || e.Param != tt.param || e.Message == "" {
				t.Fatalf("got %v, want a %d naming %s in OpenAI's shape", err, tt.status, tt.param)
			}
		})
	}
}
