package server

import (
	"net/http"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// embeddings serves POST /v1/embeddings (OpenAI's format; errors in it): the pipeline's Embed,
// and the answer under the model name the client asked for.
func (x *exchange) embeddings() {
	body, ok := x.readBody()
	if !ok {
		return
	}
	req, asBase64, err := openai.DecodeEmbeddings(body)
	if err != nil {
		x.fail(err)
		return
	}
	c := pipeline.EmbedCall{Request: req, Header: x.r.Header, Key: x.call.Key}
	c.Record = x.call.Record
	c.Record.Format = llm.FormatOpenAI
	err = x.p.Embed(x.ctx, &c)
	x.call.Record = c.Record
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusOK, "application/json", x.output(func(b []byte) []byte {
		return openai.AppendEmbeddings(b, c.Result, req.Model, asBase64)
	}))
}
