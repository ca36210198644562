package server

import (
	"net/http"

	"github.com/layer0ai/layer0/internal/wire/openai"
)

// openAIModels serves GET /v1/models in the OpenAI shape.
func (x *exchange) openAIModels() {
	ms := x.models()
	list := make([]openai.Model, len(ms))
	for i, m := range ms {
		list[i] = openai.Model{ID: m.ID, Created: m.Created.Unix()}
	}
	x.writeFull(http.StatusOK, "application/json", openai.AppendModelList(nil, list))
}

// openAIModel serves GET /v1/models/{id} in the OpenAI shape.
func (x *exchange) openAIModel(id string) {
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
