package sim

import (
	"context"
	"math"

	"github.com/zeebo/xxh3"

	"github.com/layer0ai/layer0/internal/llm"
)

// EmbedDimensions is the length of the simulator's vectors when a request does not ask for one.
const EmbedDimensions = 256

// Embed implements engine.Embedder: each text's vector is a deterministic function of the text
// alone (and of the dimensions asked for), of unit length, so that the same text always embeds
// the same and the whole embeddings path can be tested without a model. Usage counts the texts'
// tokens in the real tokenizer.
func (e *Engine) Embed(ctx context.Context, req *llm.EmbedRequest) (*llm.Embeddings, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dims := req.Dimensions
	if dims <= 0 {
		dims = EmbedDimensions
	}
	out := &llm.Embeddings{Model: req.Model, Vectors: make([][]float32, len(req.Input))}
	for i, s := range req.Input {
		out.Vectors[i] = unitVector(s, dims)
		out.InputTokens += e.tok.Count(s)
	}
	return out, nil
}

// unitVector returns dims numbers drawn from a generator seeded by the text's hash, scaled to
// length 1.
func unitVector(s string, dims int) []float32 {
	r := rng(xxh3.HashString(s))
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		x := float64(int64(r.next()>>11))/float64(1<<52) - 1 // in [-1, 1)
		v[i] = float32(x)
		norm += x * x
	}
	if norm == 0 {
		v[0], norm = 1, 1
	}
	scale := 1 / math.Sqrt(norm)
	for i := range v {
		v[i] = float32(float64(v[i]) * scale)
	}
	return v
}
