package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream/fake"
	wire "github.com/layer0ai/layer0/internal/wire/openai"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

const clientBody = `{"messages":[{"role":"user","content":"say \"model\": hi"}],"model":"llama","stream":true,"max_tokens":20,"seed":7,"logit_bias":{"1":2}}`

func TestForwardStream(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{Text: "one two three"})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	rec := httptest.NewRecorder()
	res, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(clientBody), Model: "meta-llama/Llama-3.1-8B-Instruct", ClientModel: "llama"}, fake.Writer(rec))
	if err != nil {
		t.Fatal(err)
	}
	// The engine got the client's bytes with only the model changed and usage asked for.
	got := string(f.Requests()[0].Body)
	want := `{"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"say \"model\": hi"}],"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":20,"seed":7,"logit_bias":{"1":2}}`
	if got != want {
		t.Errorf("engine got  %s\nwant        %s", got, want)
	}
	out := rec.Body.String()
	if strings.Contains(out, "meta-llama") || !strings.Contains(out, `"model":"llama"`) {
		t.Errorf("got model names in output:\n%s", out)
	}
	if strings.Contains(out, `"choices":[]`) {
		t.Error("the usage chunk the client did not ask for was passed on")
	}
	if !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Error("got no [DONE]")
	}
	// Three content deltas: the role chunk, the finish chunk and the usage chunk are none.
	if res.Usage.OutputTokens != 3 || res.Usage.InputTokens == 0 || !res.Stream || res.Bytes != int64(len(out)) || res.Deltas != 3 {
		t.Errorf("got result %+v", res)
	}
	// What the client got is a complete OpenAI stream.
	var c llm.Collector
	if err := wire.ReadStream(strings.NewReader(out), &c); err != nil {
		t.Fatal(err)
	}
	if c.Response.Content[0].Text != "one two three" {
		t.Errorf("got text %q", c.Response.Content[0].Text)
	}
}

func TestForwardStreamWithUsage(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`
	var out bytes.Buffer
	res, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(body)}, fake.Writer(&out))
	if err != nil {
		t.Fatal(err)
	}
	if string(f.Requests()[0].Body) != body {
		t.Errorf("got engine body %s, want the client's unchanged", f.Requests()[0].Body)
	}
	if !strings.Contains(out.String(), `"choices":[],"usage":{`) || res.Usage.OutputTokens == 0 {
		t.Errorf("the client asked for usage: got %+v\n%s", res, out.String())
	}
}

func TestForwardJSON(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	rec := httptest.NewRecorder()
	res, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(`{"model":"a","messages":[{"role":"user","content":"x"}]}`), Model: "b", ClientModel: "a"}, fake.Writer(rec))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stream || res.Usage.OutputTokens == 0 || !strings.Contains(rec.Body.String(), `"model":"a"`) {
		t.Errorf("got %+v\n%s", res, rec.Body.String())
	}
}

// TestForwardRenames checks that the client sees its own model name in every chunk and body
// whatever the engine reports (a dated id, its own name) and however it spaces its JSON.
func TestForwardRenames(t *testing.T) {
	tests := []struct {
		name   string
		script fake.Script
		model  string // sent to the engine; "" keeps the client's
	}{
		{"compact, dated id", fake.Script{Model: "gpt-4o-2024-08-06"}, ""},
		{"pretty, dated id", fake.Script{Model: "gpt-4o-2024-08-06", Pretty: true}, ""},
		{"pretty, upstream name", fake.Script{Pretty: true}, "meta-llama/Llama-3.1-8B-Instruct"},
		{"llama-server's own name", fake.Script{Model: "qwen2.5-7b-instruct-q4_k_m.gguf", Text: "a \"model\": b"}, "qwen"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{true, false} {
			t.Run(tt.name+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
				f := fake.NewOpenAI(tt.script)
				defer f.Close()
				e := newEngine(t, f, config.Timeouts{}, 0)
				body := `{"model":"gpt-4o","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"x"}]}`
				rec := httptest.NewRecorder()
				if _, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(body), Model: tt.model, ClientModel: "gpt-4o"}, fake.Writer(rec)); err != nil {
					t.Fatal(err)
				}
				out := rec.Body.String()
				var models []string
				if stream {
					er := sse.NewReader(strings.NewReader(out))
					for {
						_, _, data, err := er.Next()
						if err != nil {
							break
						}
						if string(data) != "[DONE]" {
							models = append(models, topModel(t, data))
						}
					}
				} else {
					models = append(models, topModel(t, []byte(out)))
				}
				if len(models) == 0 {
					t.Fatalf("no answer:\n%s", out)
				}
				for i, m := range models {
					if m != "gpt-4o" {
						t.Errorf("answer %d has model %q, want the client's gpt-4o:\n%s", i, m, out)
					}
				}
				for _, leak := range []string{tt.script.Model, tt.model} {
					if leak != "" && strings.Contains(out, leak) {
						t.Errorf("the engine's name %q leaked:\n%s", leak, out)
					}
				}
				if tt.script.Pretty && !strings.Contains(out, `"model": "gpt-4o"`) {
					t.Errorf("the engine's spacing was not kept:\n%s", out)
				}
			})
		}
	}
}

// topModel decodes the top-level model of a JSON object.
func topModel(t *testing.T, b []byte) string {
	t.Helper()
	var v struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v.Model
}

func TestForwardErrors(t *testing.T) {
	tests := []struct {
		name    string
		script  fake.Script
		body    string
		kind    apierr.Kind
		written bool
	}{
		{"status", fake.Script{Status: 404, Body: `{"error":{"message":"no such model","type":"invalid_request_error","code":"model_not_found"}}`}, clientBody, apierr.NotFound, false},
		{"error chunk", fake.Script{ErrorAfter: 2}, clientBody, apierr.BadGateway, true},
		// The role chunk is held: an error right after it leaves nothing written.
		{"error chunk after the role chunk", fake.Script{ErrorAfter: 1}, clientBody, apierr.BadGateway, false},
		{"error object with status 200", fake.Script{ErrorAfter: 1}, `{"model":"m","messages":[]}`, apierr.BadGateway, false},
		{"cut", fake.Script{CutAfter: 2}, clientBody, apierr.BadGateway, true},
		{"not an object", fake.Script{}, `[1]`, apierr.InvalidRequest, false},
		{"no model", fake.Script{}, `{"messages":[]}`, apierr.InvalidRequest, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fake.NewOpenAI(tt.script)
			defer f.Close()
			e := newEngine(t, f, config.Timeouts{}, 0)
			var out bytes.Buffer
			_, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(tt.body)}, fake.Writer(&out))
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Kind != tt.kind {
				t.Fatalf("got %v, want kind %v", err, tt.kind)
			}
			if got := out.Len() > 0; got != tt.written {
				t.Errorf("got written %v, want %v", got, tt.written)
			}
			if strings.Contains(out.String(), `"error"`) {
				t.Error("the engine's error chunk was passed on instead of returned")
			}
		})
	}
}

func TestPrelude(t *testing.T) {
	chunk := func(choices string) string {
		return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[` + choices + `]}`
	}
	tests := []struct {
		name, data string
		want       bool
	}{
		{"vLLM role chunk", chunk(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`), true},
		{"hosted API role chunk", chunk(`{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}`), true},
		{"llama.cpp role chunk", `{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}`, true},
		{"spaced, empty tool calls", `{"choices": [ {"delta": {"role": "assistant", "tool_calls": [ ], "reasoning_content": null}, "finish_reason": null} ]}`, true},
		{"empty delta", chunk(`{"index":0,"delta":{}}`), true},
		{"two empty choices", chunk(`{"index":0,"delta":{"role":"assistant"}},{"index":1,"delta":{"role":"assistant"}}`), true},
		{"content", chunk(`{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}`), false},
		{"role with content", chunk(`{"index":0,"delta":{"role":"assistant","content":"Hi"}}`), false},
		{"reasoning", chunk(`{"index":0,"delta":{"reasoning_content":"hmm"}}`), false},
		{"tool call", chunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f"}}]}}`), false},
		{"finish", chunk(`{"index":0,"delta":{"content":""},"finish_reason":"stop"}`), false},
		{"one of two choices has content", chunk(`{"index":0,"delta":{"role":"assistant"}},{"index":1,"delta":{"content":"x"}}`), false},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":1}}`, false},
		{"role chunk with usage", `{"choices":[{"delta":{"role":"assistant"}}],"usage":{"prompt_tokens":1}}`, false},
		{"no choices", chunk(``), false},
		{"no delta", chunk(`{"index":0,"text":""}`), false},
		{"not an object", `[1]`, false},
		{"truncated", `{"choices":[{"delta":{"role":"assistant"`, false},
	}
	for _, tt := range tests {
		if got := prelude([]byte(tt.data)); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// upstreamStream is a realistic vLLM stream of n tokens, as the engine sends it.
func upstreamStream(n int) []byte {
	var b bytes.Buffer
	head := `data: {"id":"chatcmpl-8d2f0c5b1e7a4c3f","object":"chat.completion.chunk","created":1735689600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[`
	b.WriteString(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for i := 0; i < n; i++ {
		b.WriteString(head + `{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(head + `{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n")
	b.WriteString(head + `],"usage":{"prompt_tokens":40,"total_tokens":296,"completion_tokens":256}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// chunkedReader hands out the stream a few events at a time, as a network would.
type chunkedReader struct {
	b []byte
	n int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.n, len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// BenchmarkPassThrough compares the gateway's own work on one 256-token streamed response:
// the pass-through path (scan the request's top level, rewrite "model", split SSE events and
// copy them, read usage) against the translating path (decode the request into llm.Request,
// encode it again, parse every chunk into events and encode every event as a new chunk).
func BenchmarkPassThrough(b *testing.B) {
	stream := upstreamStream(256)
	req := []byte(`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a long story about a lighthouse keeper and the sea."}]}`)
	b.Run("forward", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		dst := make([]byte, 0, 1024)
		for b.Loop() {
			pr, err := prepare(dst[:0], &passthrough.Pass{Body: req, Model: "meta-llama/Llama-3.1-8B-Instruct", ClientModel: "llama"})
			if err != nil {
				b.Fatal(err)
			}
			src := passthrough.Source{Body: &chunkedReader{b: stream, n: 4096}, ContentType: "text/event-stream", Stream: pr.stream, ClientModel: "llama"}
			if _, err := passthrough.Forward(&chatPolicy{inject: pr.inject}, &src, fake.Writer(io.Discard)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("translate", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		dst := make([]byte, 0, 1024)
		sw := wire.NewStreamWriter(io.Discard)
		for b.Loop() {
			r, x, err := wire.DecodeRequestExtras(req)
			if err != nil {
				b.Fatal(err)
			}
			r.Model = "meta-llama/Llama-3.1-8B-Instruct"
			dst = wire.AppendRequest(dst[:0], r)
			sw.Reset(io.Discard)
			sw.Model, sw.IncludeUsage = "llama", x.IncludeUsage
			if err := wire.ReadStream(&chunkedReader{b: stream, n: 4096}, sw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
