package openai

import (
	"context"
	"strings"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	wire "github.com/layer0ai/layer0/internal/wire/openai"
)

// maxEmbedBody bounds an engine's embeddings answer.
const maxEmbedBody = 256 << 20

// Embed implements engine.Embedder: the request goes to the engine's /v1/embeddings (beside its
// Chat Completions path), floats asked for, and the answer is read back.
func (e *Engine) Embed(ctx context.Context, req *llm.EmbedRequest) (*llm.Embeddings, error) {
	up := *req
	if e.Model != "" {
		up.Model = e.Model
	}
	buf := e.C.Buffer()
	defer e.C.PutBuffer(buf)
	*buf = wire.AppendEmbedRequest((*buf)[:0], &up)
	path := strings.TrimSuffix(e.Path, "/chat/completions") + "/embeddings"
	resp, err := e.C.Do(ctx, &upstream.Request{Path: path, Header: e.Header, Body: *buf, DecodeError: wire.DecodeError})
	if err != nil {
		return nil, err
	}
	defer resp.Close()
	rb := e.C.Buffer()
	defer e.C.PutBuffer(rb)
	body, err := upstream.ReadAll((*rb)[:0], resp.Reader(), maxEmbedBody)
	*rb = body
	if err != nil {
		return nil, resp.Err(err)
	}
	return wire.ReadEmbeddings(body, len(req.Input))
}
