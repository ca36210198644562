package server

import (
	"net/http"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// chatCompletions serves POST /v1/chat/completions in the OpenAI format (JSON, or SSE when
// "stream" is true, with the usage chunk when stream_options.include_usage is).
func (x *exchange) chatCompletions() {
	x.format = llm.FormatOpenAI
	body, ok := x.readBody()
	if !ok {
		return
	}
	req, extra, err := openai.DecodeRequestExtras(body)
	if err != nil {
		x.fail(err)
		return
	}
	x.serveJSON(body, req, extra.IncludeUsage)
}

// openAIModels serves GET /v1/models in the OpenAI shape.
func (x *exchange) openAIModels() {
	x.format = llm.FormatOpenAI
	ms := x.models()
	list := make([]openai.Model, len(ms))
	for i, m := range ms {
		list[i] = openai.Model{ID: m.ID, Created: m.Created.Unix()}
	}
	x.writeFull(http.StatusOK, "application/json", openai.AppendModelList(nil, list))
}

// openAIModel serves GET /v1/models/{id} in the OpenAI shape.
func (x *exchange) openAIModel(id string) {
	x.format = llm.FormatOpenAI
	m, err := x.model(id)
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusOK, "application/json", openai.AppendModel(nil, openai.Model{ID: m.ID, Created: m.Created.Unix()}))
}

// wantsOpenAI reports whether a models request is from an OpenAI client: Anthropic clients send
// anthropic-version (or x-anthropic-version) on every request; OpenAI clients never do.
func wantsOpenAI(r *http.Request) bool {
	return r.Header.Get("Anthropic-Version") == "" && r.Header.Get("X-Anthropic-Version") == ""
}

// writeOpenAIError writes e as an OpenAI error response.
func (x *exchange) writeOpenAIError(e *apierr.Error) {
	status := openai.Status(e)
	x.writeFull(status, "application/json", openai.AppendError(nil, e))
	x.call.Record.Status = status
}
