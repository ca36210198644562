package fake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

const (
	openAIID      = "chatcmpl-8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a"
	openAIToolID  = "chatcmpl-tool-3f1e9a7c5b2d4e6f"
	openAICreated = 1735689600
)

// openAIErrorJSON is vLLM's error object, as its in-stream error chunk carries it.
const openAIErrorJSON = `{"error": {"object": "error", "message": "The engine failed while generating.", "type": "InternalServerError", "param": null, "code": 500}}`

// openAIError is vLLM's in-stream error.
const openAIError = "data: " + openAIErrorJSON + "\n\n"

// openAIEvents writes the stream as vLLM does (vllm/entrypoints/openai/serving_chat.py):
// compact JSON, a role chunk, one chunk per token, a finish chunk carrying stop_reason, and with
// include_usage a final chunk with empty choices; then data: [DONE].
func openAIEvents(rp *reply, usage bool) []string {
	head := fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":%d,"model":%s,"choices":[`, openAIID, openAICreated, q(rp.model))
	chunk := func(delta, finish string) string {
		return head + `{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + "}]}\n\n"
	}
	evs := []string{chunk(`{"role":"assistant","content":""}`, "null")}
	finish := `"stop","stop_reason":null`
	if rp.stop != "" {
		finish = q(rp.stop) + `,"stop_reason":null`
	}
	if rp.tool != "" {
		evs = append(evs, chunk(fmt.Sprintf(`{"tool_calls":[{"id":%q,"type":"function","index":0,"function":{"name":%s}}]}`, openAIToolID, q(rp.tool)), "null"))
		for _, a := range rp.args {
			evs = append(evs, chunk(`{"tool_calls":[{"index":0,"function":{"arguments":`+q(a)+`}}]}`, "null"))
		}
		finish = `"tool_calls","stop_reason":null`
	} else {
		for _, w := range rp.words {
			evs = append(evs, chunk(`{"content":`+q(w)+`}`, "null"))
		}
	}
	evs = append(evs, chunk(`{"content":""}`, finish))
	if usage {
		evs = append(evs, head+`],"usage":`+openAIUsage(rp)+"}\n\n")
	}
	return append(evs, "data: [DONE]\n\n")
}

func openAIUsage(rp *reply) string {
	details := "null"
	if rp.cached > 0 {
		details = fmt.Sprintf(`{"cached_tokens":%d}`, rp.cached)
	}
	return fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":%s}`,
		rp.prompt, rp.prompt+rp.output(), rp.output(), details)
}

func openAIJSON(w http.ResponseWriter, rp *reply) {
	msg := `{"role":"assistant","reasoning_content":null,"content":` + q(strings.Join(rp.words, "")) + `,"tool_calls":[]}`
	finish := "stop"
	if rp.stop != "" {
		finish = rp.stop
	}
	if rp.tool != "" {
		msg = fmt.Sprintf(`{"role":"assistant","reasoning_content":null,"content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":%s,"arguments":%s}}]}`,
			openAIToolID, q(rp.tool), q(strings.Join(rp.args, "")))
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"object":"chat.completion","created":%d,"model":%s,"choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q,"stop_reason":null}],"usage":%s,"prompt_logprobs":null}`,
		openAIID, openAICreated, q(rp.model), msg, finish, openAIUsage(rp))
}

// embeddings answers an embeddings request as the OpenAI API does: input i of length n gets the
// vector [n, i, 1]; the prompt counts a token per four bytes.
func embeddings(w http.ResponseWriter, body []byte) {
	var req struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" || len(req.Input) == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		io.WriteString(w, `{"error":{"message":"bad embeddings request","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	}
	out := struct {
		Object string `json:"object"`
		Data   []item `json:"data"`
		Model  string `json:"model"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}{Object: "list", Model: req.Model}
	for i, s := range req.Input {
		out.Data = append(out.Data, item{"embedding", i, []float64{float64(len(s)), float64(i), 1}})
		out.Usage.PromptTokens += len(s)/4 + 1
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
