package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// orderSink records events and checks they follow the order llm.EventKind documents.
type orderSink struct {
	llm.Collector
	kinds   []llm.EventKind
	flushes int
	open    int // open block index, -1 when none
	blocks  int
	err     error
}

func newOrderSink() *orderSink { return &orderSink{open: -1} }

func (s *orderSink) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf(format, args...)
	}
}

func (s *orderSink) Send(ev *llm.Event) error {
	started := len(s.kinds) > 0
	s.kinds = append(s.kinds, ev.Kind)
	switch {
	case !started && ev.Kind != llm.EventStart:
		s.fail("first event is kind %d, want start", ev.Kind)
	case started && ev.Kind == llm.EventStart:
		s.fail("second start event")
	case ev.Kind == llm.EventBlockStart:
		if s.open != -1 || ev.Index != s.blocks {
			s.fail("block start %d while block %d open, %d blocks so far", ev.Index, s.open, s.blocks)
		}
		s.open = ev.Index
		s.blocks++
	case ev.Kind == llm.EventTextDelta || ev.Kind == llm.EventToolDelta:
		if ev.Index != s.open {
			s.fail("delta for block %d while block %d open", ev.Index, s.open)
		}
	case ev.Kind == llm.EventBlockStop:
		if ev.Index != s.open {
			s.fail("stop for block %d while block %d open", ev.Index, s.open)
		}
		s.open = -1
	case ev.Kind == llm.EventStop:
		if s.open != -1 {
			s.fail("message stop with block %d open", s.open)
		}
	}
	return s.Collector.Send(ev)
}

func (s *orderSink) Flush() error { s.flushes++; return nil }

func (s *orderSink) stopped() bool {
	return len(s.kinds) > 0 && s.kinds[len(s.kinds)-1] == llm.EventStop
}

func TestReadStreamFixtures(t *testing.T) {
	tests := []struct {
		file    string
		want    *llm.Response
		errKind apierr.Kind
		errText string
	}{
		{file: "vllm_text.sse", want: &llm.Response{ID: "msg_8d2f0c5b1e7a4c3f", Model: "meta-llama/Llama-3.1-8B-Instruct",
			Content: []llm.Block{{Type: llm.BlockText, Text: "Hello world"}}, Stop: llm.StopSequence, StopSequence: "\n\n",
			Usage: llm.Usage{InputTokens: 5, CacheReadInputTokens: 16, OutputTokens: 3}}},
		{file: "vllm_tools.sse", want: &llm.Response{ID: "msg_8d2f0c5b1e7a4c3f", Model: "meta-llama/Llama-3.1-8B-Instruct",
			Content: []llm.Block{{Type: llm.BlockToolUse, ID: "chatcmpl-tool-3f1e9a", Name: "get_weather", Input: json.RawMessage(`{"city": "Paris"}`)}},
			Stop:    llm.StopToolUse, Usage: llm.Usage{InputTokens: 310, OutputTokens: 20}}},
		{file: "openai_text.sse", want: &llm.Response{ID: "msg_B9MHDbslfkBeAs8l4bebGdFOJ6PeG", Model: "gpt-4o-2024-08-06",
			Content: []llm.Block{{Type: llm.BlockText, Text: "Hi!"}}, Stop: llm.StopMaxTokens,
			Usage: llm.Usage{InputTokens: 176, CacheReadInputTokens: 1024, OutputTokens: 2}}},
		{file: "openai_tools.sse", want: &llm.Response{ID: "msg_B9MHDbslfkBeAs8l4bebGdFOJ6PeG", Model: "gpt-4o-2024-08-06",
			Content: []llm.Block{
				{Type: llm.BlockToolUse, ID: "toolu_DdmO9pD3xa9XTPNJ32zg2hcA", Name: "get_weather", Input: json.RawMessage(`{"location":"Paris"}`)},
				{Type: llm.BlockToolUse, ID: "toolu_2", Name: "get_time", Input: json.RawMessage(`{}`)}},
			Stop: llm.StopToolUse}},
		{file: "llamacpp_no_done.sse", want: &llm.Response{ID: "msg_Kq2x", Model: "qwen2.5",
			Content: []llm.Block{{Type: llm.BlockText, Text: "Bonjour"}}, Usage: llm.Usage{InputTokens: 9, OutputTokens: 1}}},
		{file: "llamacpp_error.sse", errKind: apierr.BadGateway, errText: "the slot was released"},
		{file: "vllm_error.sse", errKind: apierr.InvalidRequest, errText: "maximum model length"},
		{file: "truncated.sse", errKind: apierr.BadGateway, errText: "before the response was complete"},
		{file: "truncated_mid_line.sse", errKind: apierr.BadGateway, errText: "invalid stream chunk"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			s := newOrderSink()
			err = ReadStream(bytes.NewReader(b), s)
			if s.err != nil {
				t.Errorf("event order: %v", s.err)
			}
			if tt.want == nil {
				var e *apierr.Error
				if !errors.As(err, &e) {
					t.Fatalf("got error %v, want *apierr.Error", err)
				}
				if e.Kind != tt.errKind || !strings.Contains(e.Message, tt.errText) {
					t.Errorf("got kind %v message %q, want kind %v containing %q", e.Kind, e.Message, tt.errKind, tt.errText)
				}
				if s.stopped() {
					t.Error("got a stop event on a failed stream")
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if diff := cmp.Diff(*tt.want, s.Response); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
			if s.flushes == 0 {
				t.Error("got no Flush")
			}
		})
	}
}

// pieceReader returns one piece per Read, as a network connection would.
type pieceReader struct{ pieces []string }

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.pieces[0])
	r.pieces[0] = r.pieces[0][n:]
	if r.pieces[0] == "" {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}

// TestReadStreamFlushes checks that ReadStream flushes exactly when its input runs dry: two
// chunks that arrive together are flushed once, a chunk alone is flushed alone.
func TestReadStreamFlushes(t *testing.T) {
	b, _ := os.ReadFile(filepath.Join("testdata", "vllm_text.sse"))
	events := strings.SplitAfter(string(b), "\n\n")
	// role+Hello together, " world" alone, finish+usage+[DONE] together.
	r := &pieceReader{pieces: []string{events[0] + events[1], events[2], events[3] + events[4] + events[5]}}
	s := newOrderSink()
	if err := ReadStream(r, s); err != nil {
		t.Fatal(err)
	}
	if s.flushes != 3 {
		t.Errorf("got %d flushes, want 3", s.flushes)
	}
}

func TestReadStreamLongLine(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	body := `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"` + long + `"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	s := newOrderSink()
	if err := ReadStream(strings.NewReader(body), s); err != nil {
		t.Fatal(err)
	}
	if got := s.Response.Content[0].Text; len(got) != len(long) {
		t.Errorf("got %d bytes of text, want %d", len(got), len(long))
	}
	huge := "data: " + strings.Repeat("y", sse.MaxEvent+10) + "\n\n"
	if err := ReadStream(strings.NewReader(huge), newOrderSink()); err == nil {
		t.Error("got no error for an event over sse.MaxEvent")
	}
}

func TestReadStreamSinkError(t *testing.T) {
	b, _ := os.ReadFile(filepath.Join("testdata", "vllm_text.sse"))
	want := errors.New("client gone")
	err := ReadStream(bytes.NewReader(b), failSink{want})
	if !errors.Is(err, want) {
		t.Errorf("got %v, want the sink's error", err)
	}
}

type failSink struct{ err error }

func (f failSink) Send(*llm.Event) error { return f.err }
func (f failSink) Flush() error          { return f.err }

func TestReadResponse(t *testing.T) {
	body := `{"id":"chatcmpl-abc","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,
		"message":{"role":"assistant","content":"It is sunny.","tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],
		"usage":{"prompt_tokens":10,"total_tokens":14,"completion_tokens":4,"prompt_tokens_details":null},"prompt_logprobs":null}`
	s := newOrderSink()
	if err := ReadResponse([]byte(body), s); err != nil {
		t.Fatal(err)
	}
	want := llm.Response{ID: "msg_abc", Model: "m", Content: []llm.Block{{Type: llm.BlockText, Text: "It is sunny."}},
		Usage: llm.Usage{InputTokens: 10, OutputTokens: 4}}
	if diff := cmp.Diff(want, s.Response); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
	if err := ReadResponse([]byte(`{"error":{"message":"nope","type":"x","code":"model_not_found"}}`), newOrderSink()); err == nil {
		t.Error("got no error for an error body")
	}
	if err := ReadResponse([]byte(`{"id":"x","choices":[{"index":0,"message":{"content":"a"}}]}`), newOrderSink()); err == nil {
		t.Error("got no error for a response without finish_reason")
	}
}

func TestDecodeError(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		kind   apierr.Kind
		msg    string
		code   string
	}{
		{"openai 400", 400, `{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":"messages","code":null}}`, apierr.InvalidRequest, "Invalid 'messages'", ""},
		{"openai 404", 404, `{"error":{"message":"The model 'x' does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, apierr.NotFound, "The model 'x' does not exist", "model_not_found"},
		{"openai 429", 429, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, apierr.RateLimit, "Rate limit reached", "rate_limit_exceeded"},
		{"vllm flat", 400, `{"object":"error","message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}`, apierr.InvalidRequest, "This model's maximum context length is 8192 tokens.", "context_length_exceeded"},
		{"vllm nested", 404, `{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}}`, apierr.NotFound, "The model `x` does not exist.", ""},
		{"ollama", 404, `{"error":"model \"llama9\" not found, try pulling it first"}`, apierr.NotFound, `model "llama9" not found, try pulling it first`, ""},
		{"llama.cpp 503", 503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, apierr.Overloaded, "Loading model", ""},
		{"tgi", 422, `{"error":"Input validation error: inputs tokens + max_new_tokens must be <= 4096","error_type":"validation"}`, apierr.InvalidRequest, "Input validation error: inputs tokens + max_new_tokens must be <= 4096", ""},
		{"fastapi", 500, `{"detail":"Internal Server Error"}`, apierr.BadGateway, "Internal Server Error", ""},
		{"plain text", 502, "Bad Gateway\n", apierr.BadGateway, "Bad Gateway", ""},
		{"empty", 500, ``, apierr.BadGateway, "engine error (status 500)", ""},
		{"auth hides text", 401, `{"error":{"message":"Incorrect API key provided: sk-live-123","type":"invalid_request_error","code":"invalid_api_key"}}`, apierr.BadGateway, "engine refused layer0's credentials (status 401)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := DecodeError(tt.status, []byte(tt.body))
			if e.Kind != tt.kind || e.Message != tt.msg || e.Code != tt.code {
				t.Errorf("got kind %v message %q code %q, want %v %q %q", e.Kind, e.Message, e.Code, tt.kind, tt.msg, tt.code)
			}
		})
	}
	// The hosted API's type says what a 429's limit counts; a token limit stays one.
	for typ, want := range map[string]string{"tokens": apierr.LimitTokens, "requests": "", "": ""} {
		e := DecodeError(429, []byte(`{"error":{"message":"Rate limit reached","type":"`+typ+`","code":"rate_limit_exceeded"}}`))
		if e.Limit != want {
			t.Errorf("429 of type %q: got limit %q, want %q", typ, e.Limit, want)
		}
	}
	long := DecodeError(400, []byte(`{"error":{"message":"`+strings.Repeat("é", 1000)+`"}}`))
	if len(long.Message) > maxEngineMessage+len("…") {
		t.Errorf("got a %d-byte message, want it cut", len(long.Message))
	}
}

func TestChunkUsage(t *testing.T) {
	u, ok := ChunkUsage([]byte(`{"id":"x","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":3}}}`))
	if !ok || u != (llm.Usage{InputTokens: 4, CacheReadInputTokens: 3, OutputTokens: 2}) {
		t.Errorf("got %+v %v", u, ok)
	}
	if _, ok := ChunkUsage([]byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"\"usage\":{"}}],"usage":null}`)); ok {
		t.Error("got usage from a chunk whose usage is null")
	}
}

func TestStreamError(t *testing.T) {
	tests := []struct {
		data string
		kind apierr.Kind
		none bool
	}{
		{data: `{"id":"x","choices":[{"index":0,"delta":{"content":"the \"error\" word"}}]}`, none: true},
		{data: `{"error":{"message":"boom","type":"server_error","code":null}}`, kind: apierr.BadGateway},
		{data: `{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}`, kind: apierr.InvalidRequest},
		{data: `{"error":null,"id":"x"}`, none: true},
	}
	for _, tt := range tests {
		e := StreamError([]byte(tt.data))
		if tt.none {
			if e != nil {
				t.Errorf("got %v for %s, want none", e, tt.data)
			}
			continue
		}
		if e == nil || e.Kind != tt.kind {
			t.Errorf("got %v for %s, want kind %v", e, tt.data, tt.kind)
		}
	}
	if u, ok := ParseUsage([]byte(`{"prompt_tokens":5,"completion_tokens":1}`)); !ok || u.InputTokens != 5 || u.OutputTokens != 1 {
		t.Errorf("got %+v %v", u, ok)
	}
}

// TestReadStreamErrorLineAtEOF: llama.cpp's error: line is read even when the stream ends
// right after it, without a line end.
func TestReadStreamErrorLineAtEOF(t *testing.T) {
	for _, body := range []string{"error: {\"message\":\"boom\",\"code\":503}\n\n", "error: {\"message\":\"boom\",\"code\":503}"} {
		err := ReadStream(strings.NewReader(body), newOrderSink())
		var e *apierr.Error
		if !errors.As(err, &e) || e.Message != "boom" {
			t.Errorf("%q: got %v, want the line's error", body, err)
		}
	}
}
