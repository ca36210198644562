package openai

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/layer0ai/layer0/internal/llm"
)

func BenchmarkStreamWriterTextDelta(b *testing.B) {
	w := &countWriter{}
	sw := NewStreamWriter(w)
	sw.Send(&llm.Event{Kind: llm.EventStart, ID: "chatcmpl-1", Model: "m"})
	sw.Send(&llm.Event{Kind: llm.EventBlockStart, Block: llm.BlockText})
	ev := &llm.Event{Kind: llm.EventTextDelta, Text: " token"}
	b.ReportAllocs()
	for b.Loop() {
		_ = sw.Send(ev)
		_ = sw.Flush()
	}
}

func BenchmarkReadStream(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "vllm_text.sse"))
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(data)
		var c llm.Collector
		if err := ReadStream(r, &c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRequestInPlace is BenchmarkDecodeRequest as the server decodes with
// DecodeInPlace: the request's strings in the body's own buffer, no copy of it.
func BenchmarkDecodeRequestInPlace(b *testing.B) {
	body := []byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRequestText(unsafe.String(unsafe.SliceData(body), len(body))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRequest(b *testing.B) {
	r, err := DecodeRequest([]byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequest(buf[:0], r)
	}
}

// largeRequest is a long conversation with tools: a system prompt, eight function tools with
// schemas, and turns of long text, tool calls and tool results, as a coding agent sends.
func largeRequest() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt","stream":true,"max_completion_tokens":4096,"temperature":0.2,"parallel_tool_calls":true,"tools":[`)
	for i := range 8 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"function","function":{"name":"tool_%d","description":"Runs the %d-th tool over the workspace and returns its output as text.",`+
			`"parameters":{"type":"object","properties":{"path":{"type":"string","description":"A path in the workspace"},"limit":{"type":"integer"},"flags":{"type":"array","items":{"type":"string"}}},"required":["path"]}}}`, i, i)
	}
	b.WriteString(`],"tool_choice":"auto","messages":[{"role":"system","content":"You are a careful coding assistant. Answer briefly and cite the files you read."}`)
	para := strings.Repeat("The quick brown fox jumps over the lazy dog while the build runs; \\\"quotes\\\" and tabs\\t stay escaped. ", 20)
	for i := range 12 {
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"text","text":"Turn %d: %s"}]}`, i, para)
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Looking at it.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"tool_%d","arguments":"{\"path\":\"src/main.go\",\"limit\":%d}"}}]}`, i, i%8, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"%s"}`, i, para)
	}
	b.WriteString(`,{"role":"user","content":"Now summarise."}]}`)
	return []byte(b.String())
}

func BenchmarkDecodeRequestLarge(b *testing.B) {
	body := largeRequest()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRequestLargeInPlace is BenchmarkDecodeRequestLarge in place (see
// BenchmarkDecodeRequestInPlace).
func BenchmarkDecodeRequestLargeInPlace(b *testing.B) {
	body := largeRequest()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRequestText(unsafe.String(unsafe.SliceData(body), len(body))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEmbeddings(b *testing.B) {
	body := []byte(`{"model":"embed","input":["The quick brown fox","jumps over the lazy dog","and runs away"],"encoding_format":"float"}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEmbeddings(body); err != nil {
			b.Fatal(err)
		}
	}
}

// vllmStream is a vLLM answer of n content tokens as it streams them: a role chunk, one chunk
// per token (every eighth an escaped newline), the finish chunk and the usage chunk, [DONE].
func vllmStream(n int) []byte {
	const head = `data: {"id":"chatcmpl-8d2f0c5b1e7a4c3f","object":"chat.completion.chunk","created":1735689600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":`
	var b bytes.Buffer
	b.WriteString(head + `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for i := range n {
		tok := " token"
		if i%8 == 7 {
			tok = `.\n`
		}
		b.WriteString(head + `{"content":"` + tok + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(head + `{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n")
	fmt.Fprintf(&b, `data: {"id":"chatcmpl-8d2f0c5b1e7a4c3f","object":"chat.completion.chunk","created":1735689600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":21,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":16}}}`+"\n\ndata: [DONE]\n\n", 21+n, n)
	return b.Bytes()
}

// BenchmarkReadStream100 reads a 100-token vLLM text stream, as the translating path does for
// every answer of an OpenAI-compatible engine to a client of another format.
func BenchmarkReadStream100(b *testing.B) {
	data := vllmStream(100)
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(data)
		var c llm.Collector
		if err := ReadStream(r, &c); err != nil {
			b.Fatal(err)
		}
	}
}
