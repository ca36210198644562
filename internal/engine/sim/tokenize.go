package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// The "bytes" tokenizer (config.Sim.Tokenizer): a chat template of its own and one token per
// byte, so that the engine stores blocks of token ids the gateway's cl100k_base rendering never
// produces — as a vLLM serving another model's vocabulary does. Its ids: 1 begins the prompt, 2
// opens a turn (the role's name and a newline follow, as bytes), 3 closes it; byte b is
// b+byteOffset.
const (
	byteBegin  = 1
	byteOpen   = 2
	byteClose  = 3
	byteOffset = 16
)

// bytesRenderer renders prompts in the "bytes" tokenizer. It implements prefix.Renderer.
type bytesRenderer struct{}

// AppendRequest appends req's prompt, generation prompt included, to dst.
func (bytesRenderer) AppendRequest(dst []uint32, req *llm.Request) []uint32 {
	return appendBytesPrompt(dst, req, true)
}

// appendBytesPrompt renders req's tools, system prompt and messages, then the opening of the
// assistant's turn when gen is set.
func appendBytesPrompt(dst []uint32, req *llm.Request, gen bool) []uint32 {
	dst = append(dst, byteBegin)
	for _, t := range req.Tools {
		dst = appendBytesTurn(dst, "tool", t.Name, "\n", t.Description, "\n", string(t.InputSchema))
	}
	if sys := req.SystemText(); sys != "" {
		dst = appendBytesTurn(dst, "system", sys)
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		dst = appendBytes(append(dst, byteOpen), m.Role.String()+"\n")
		dst = appendBlocks(dst, m.Content)
		dst = append(dst, byteClose)
	}
	if gen {
		dst = appendBytes(append(dst, byteOpen), "assistant\n")
	}
	return dst
}

func appendBlocks(dst []uint32, blocks []llm.Block) []uint32 {
	for _, b := range blocks {
		switch b.Type {
		case llm.BlockText:
			dst = appendBytes(dst, b.Text)
		case llm.BlockToolUse:
			dst = appendBytes(appendBytes(dst, b.Name+" "), string(b.Input))
		case llm.BlockToolResult:
			dst = appendBlocks(appendBytes(dst, b.ToolUseID+" "), b.Content)
		case llm.BlockImage:
			dst = appendBytes(dst, "[image]")
		}
	}
	return dst
}

func appendBytesTurn(dst []uint32, role string, parts ...string) []uint32 {
	dst = appendBytes(append(dst, byteOpen), role+"\n")
	for _, p := range parts {
		dst = appendBytes(dst, p)
	}
	return append(dst, byteClose)
}

func appendBytes(dst []uint32, s string) []uint32 {
	for i := 0; i < len(s); i++ {
		dst = append(dst, uint32(s[i])+byteOffset)
	}
	return dst
}

// Tokenize returns req's prompt as the engine tokenizes it (its KV cache's token ids), with the
// opening of the assistant's turn when gen is set.
func (e *Engine) Tokenize(req *llm.Request, gen bool) []uint32 {
	if e.cfg.Tokenizer == config.SimTokenizerBytes {
		return appendBytesPrompt(nil, req, gen)
	}
	return e.tok.AppendRequest(nil, req) // the gateway's framing always ends with the opening
}

// maxTokenizeBody bounds a /tokenize request.
const maxTokenizeBody = 32 << 20

// ServeTokenize answers vLLM's POST /tokenize for chat messages — {"model", "messages",
// "tools", "add_generation_prompt"} → {"tokens", "count", "max_model_len"} — with the engine's
// own token ids, so that a gateway in front of it can key its prefix index as the engine keys
// its KV cache (prefix_cache.tokenize: engine). The messages are read as a Chat Completions
// request's.
func (e *Engine) ServeTokenize(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenizeBody+1))
	if err != nil || len(body) > maxTokenizeBody {
		http.Error(w, "unreadable or oversized body", http.StatusBadRequest)
		return
	}
	var opts struct {
		Model               *string `json:"model"`
		AddGenerationPrompt *bool   `json:"add_generation_prompt"`
	}
	if err := json.Unmarshal(body, &opts); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if opts.Model == nil {
		// The decoder requires a model; /tokenize does not.
		body = append([]byte(`{"model":"sim",`), body[1:]...)
	}
	req, err := openai.DecodeRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	toks := e.Tokenize(req, opts.AddGenerationPrompt == nil || *opts.AddGenerationPrompt)
	out := make([]byte, 0, 16+6*len(toks))
	out = append(out, `{"tokens":[`...)
	for i, t := range toks {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(t), 10)
	}
	out = append(out, `],"count":`...)
	out = strconv.AppendInt(out, int64(len(toks)), 10)
	out = append(out, `,"max_model_len":`...)
	out = strconv.AppendInt(out, int64(e.cfg.ContextWindow), 10)
	out = append(out, '}')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// AppendRequest appends req's prompt as the engine tokenizes it to dst: the engine is a
// prefix.Renderer, for the prefix index of a replica keyed by the engine's own tokens
// (prefix_cache.tokenize: engine).
func (e *Engine) AppendRequest(dst []uint32, req *llm.Request) []uint32 {
	return e.render.AppendRequest(dst, req)
}
