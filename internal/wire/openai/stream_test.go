package openai

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
	}
}

// toolStream is a response with text then two tool calls, as an engine would send it.
func toolStream() []llm.Event {
	return []llm.Event{
		{Kind: llm.EventStart, ID: "msg_01XYZ", Model: "claude-x", Usage: llm.Usage{InputTokens: 10, CacheReadInputTokens: 90}},
		{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText},
		{Kind: llm.EventTextDelta, Index: 0, Text: "Let me \"check\"\n"},
		{Kind: llm.EventTextDelta, Index: 0, Text: "the weather."},
		{Kind: llm.EventBlockStop, Index: 0},
		{Kind: llm.EventBlockStart, Index: 1, Block: llm.BlockToolUse, ID: "toolu_01A", Name: "get_weather"},
		{Kind: llm.EventToolDelta, Index: 1, Text: `{"city":`},
		{Kind: llm.EventToolDelta, Index: 1, Text: `"Paris"}`},
		{Kind: llm.EventBlockStop, Index: 1},
		{Kind: llm.EventBlockStart, Index: 2, Block: llm.BlockToolUse, ID: "toolu_01B", Name: "get_time"},
		{Kind: llm.EventBlockStop, Index: 2},
		{Kind: llm.EventStop, Stop: llm.StopToolUse, Usage: llm.Usage{InputTokens: 10, CacheReadInputTokens: 90, OutputTokens: 25}},
	}
}

func writeEvents(t *testing.T, sw *StreamWriter, evs []llm.Event) {
	t.Helper()
	for i := range evs {
		if err := sw.Send(&evs[i]); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%3 == 2 {
			if err := sw.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestStreamWriterGolden(t *testing.T) {
	for _, usage := range []bool{false, true} {
		var out bytes.Buffer
		sw := NewStreamWriter(&out)
		sw.Created, sw.Model, sw.IncludeUsage = 1735689600, "my-model", usage
		writeEvents(t, sw, toolStream())
		if !sw.Done() {
			t.Error("got Done false after stop, want true")
		}
		name := "stream_tools.sse"
		if usage {
			name = "stream_tools_usage.sse"
		}
		golden(t, name, out.Bytes())
	}
}

// sdkStream parses SSE bytes with the official openai-go SDK's decoder and accumulator.
func sdkStream(t *testing.T, body []byte) (oai.ChatCompletionAccumulator, []string, error) {
	t.Helper()
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(body))}
	st := ssestream.NewStream[oai.ChatCompletionChunk](ssestream.NewDecoder(res), nil)
	var acc oai.ChatCompletionAccumulator
	var ids []string
	for st.Next() {
		ch := st.Current()
		ids = append(ids, ch.ID)
		if !acc.AddChunk(ch) {
			t.Errorf("SDK accumulator rejected chunk %d (id %q)", len(ids), ch.ID)
		}
	}
	return acc, ids, st.Err()
}

func TestStreamWriterSDK(t *testing.T) {
	var out bytes.Buffer
	sw := NewStreamWriter(&out)
	sw.Created, sw.IncludeUsage = 1735689600, true
	writeEvents(t, sw, toolStream())
	acc, ids, err := sdkStream(t, out.Bytes())
	if err != nil {
		t.Fatalf("got SDK stream error %v, want none", err)
	}
	for _, id := range ids {
		if id != "chatcmpl-01XYZ" {
			t.Errorf("got chunk id %q, want chatcmpl-01XYZ on every chunk", id)
		}
	}
	c := acc.ChatCompletion
	if len(c.Choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(c.Choices))
	}
	msg := c.Choices[0].Message
	if got, want := msg.Content, "Let me \"check\"\nthe weather."; got != want {
		t.Errorf("got content %q, want %q", got, want)
	}
	if got := c.Choices[0].FinishReason; got != "tool_calls" {
		t.Errorf("got finish_reason %q, want tool_calls", got)
	}
	type call struct{ ID, Name, Args string }
	var calls []call
	for _, tc := range msg.ToolCalls {
		calls = append(calls, call{tc.ID, tc.Function.Name, tc.Function.Arguments})
	}
	want := []call{{"call_01A", "get_weather", `{"city":"Paris"}`}, {"call_01B", "get_time", ""}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("tool calls mismatch (-want +got):\n%s", diff)
	}
	if got := c.Usage; got.PromptTokens != 100 || got.CompletionTokens != 25 || got.TotalTokens != 125 || got.PromptTokensDetails.CachedTokens != 90 {
		t.Errorf("got usage %+v, want prompt 100 (90 cached), completion 25, total 125", got)
	}
}

func TestStreamWriterError(t *testing.T) {
	var out bytes.Buffer
	sw := NewStreamWriter(&out)
	evs := toolStream()[:4]
	writeEvents(t, sw, evs)
	if err := sw.WriteError(&apierr.Error{Kind: apierr.BadGateway, Message: "engine failed", Cause: io.ErrUnexpectedEOF}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "[DONE]") {
		t.Error("got [DONE] after an error, want none")
	}
	if strings.Contains(out.String(), "unexpected EOF") {
		t.Error("the internal cause reached the client")
	}
	acc, _, err := sdkStream(t, out.Bytes())
	if err == nil || !strings.Contains(err.Error(), "engine failed") {
		t.Fatalf("got SDK error %v, want one saying engine failed", err)
	}
	if got := acc.Choices[0].Message.Content; got != "Let me \"check\"\nthe weather." {
		t.Errorf("got content %q before the error", got)
	}
	if err := sw.Send(&evs[2]); err == nil {
		t.Error("got no error for Send after WriteError")
	}
}

func TestStreamWriterNoErrorKey(t *testing.T) {
	var out bytes.Buffer
	sw := NewStreamWriter(&out)
	sw.IncludeUsage = true
	writeEvents(t, sw, toolStream())
	if bytes.Contains(out.Bytes(), []byte(`"error"`)) {
		t.Errorf("a normal stream carries an error key, which the SDK treats as a failure:\n%s", out.Bytes())
	}
}

func TestStreamWriterFlushOnly(t *testing.T) {
	var out bytes.Buffer
	sw := NewStreamWriter(&out)
	evs := toolStream()
	for i := range evs[:4] {
		_ = sw.Send(&evs[i])
	}
	if out.Len() != 0 {
		t.Fatalf("got %d bytes written before Flush, want 0", out.Len())
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "data: "); got != 3 {
		t.Errorf("got %d chunks after Flush, want 3", got)
	}
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

func TestStreamWriterAllocs(t *testing.T) {
	w := &countWriter{}
	sw := NewStreamWriter(w)
	sw.Send(&llm.Event{Kind: llm.EventStart, ID: "chatcmpl-1", Model: "m"})
	sw.Send(&llm.Event{Kind: llm.EventBlockStart, Block: llm.BlockText})
	ev := &llm.Event{Kind: llm.EventTextDelta, Text: "hello world, \"token\"\n"}
	allocs := testing.AllocsPerRun(1000, func() {
		_ = sw.Send(ev)
		_ = sw.Flush()
	})
	if allocs > 2 {
		t.Errorf("got %.1f allocs per text delta, want at most 2", allocs)
	}
}

func TestStreamRoundTrip(t *testing.T) {
	var out bytes.Buffer
	sw := NewStreamWriter(&out)
	sw.IncludeUsage = true
	evs := toolStream()
	writeEvents(t, sw, evs)
	var want llm.Collector
	for i := range evs {
		_ = want.Send(&evs[i])
	}
	var got llm.Collector
	if err := ReadStream(&out, &got); err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	w := want.Response
	// OpenAI cannot tell text blocks apart or say that a tool took no arguments: both come back
	// as one text block and an empty object.
	if diff := cmp.Diff(w, got.Response); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
}

func TestAppendResponseSDK(t *testing.T) {
	resp := &llm.Response{ID: "msg_1", Model: "m", Stop: llm.StopToolUse,
		Content: []llm.Block{{Type: llm.BlockText, Text: "a\"b"}, {Type: llm.BlockText, Text: "c"},
			{Type: llm.BlockToolUse, ID: "toolu_7", Name: "f", Input: json.RawMessage(`{"x":1}`)}},
		Usage: llm.Usage{InputTokens: 3, OutputTokens: 4, CacheReadInputTokens: 5}}
	body := AppendResponse(nil, resp, "", 1735689600)
	golden(t, "response_tools.json", body)
	var c oai.ChatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("SDK cannot decode: %v", err)
	}
	if c.ID != "chatcmpl-1" || c.Choices[0].Message.Content != "a\"bc" || c.Choices[0].FinishReason != "tool_calls" ||
		c.Choices[0].Message.ToolCalls[0].ID != "call_7" || c.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"x":1}` ||
		c.Usage.PromptTokens != 8 || c.Usage.TotalTokens != 12 {
		t.Errorf("got %+v", c)
	}
	// And back through the client side.
	var got llm.Collector
	if err := ReadResponse(body, &got); err != nil {
		t.Fatal(err)
	}
	want := llm.Response{ID: "msg_1", Model: "m", Stop: llm.StopToolUse,
		Content: []llm.Block{{Type: llm.BlockText, Text: "a\"bc"}, {Type: llm.BlockToolUse, ID: "toolu_7", Name: "f", Input: json.RawMessage(`{"x":1}`)}},
		Usage:   llm.Usage{InputTokens: 3, OutputTokens: 4, CacheReadInputTokens: 5}}
	if diff := cmp.Diff(want, got.Response); diff != "" {
		t.Errorf("ReadResponse mismatch (-want +got):\n%s", diff)
	}
}

func TestAppendError(t *testing.T) {
	tests := []struct {
		err  *apierr.Error
		want string
	}{
		{apierr.Invalid("messages", "required"), `{"error":{"message":"messages: required","type":"invalid_request_error","param":"messages","code":null}}`},
		{&apierr.Error{Kind: apierr.Authentication, Message: "bad key"}, `{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{&apierr.Error{Kind: apierr.NotFound, Message: "no model x", Param: "model"}, `{"error":{"message":"no model x","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
		{&apierr.Error{Kind: apierr.RateLimit, Message: "slow down"}, `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
		{&apierr.Error{Kind: apierr.RateLimit, Message: "slow down", Code: "RATE_LIMITED", Limit: apierr.LimitTokens}, `{"error":{"message":"slow down","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
		{&apierr.Error{Kind: apierr.API, Message: "internal error", Cause: io.EOF}, `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`},
		{&apierr.Error{Kind: apierr.InvalidRequest, Message: "too long", Code: "CONTEXT_LENGTH_EXCEEDED"}, `{"error":{"message":"too long","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`},
	}
	for _, tt := range tests {
		if got := string(AppendError(nil, tt.err)); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
	if got := Status(&apierr.Error{Kind: apierr.Overloaded}); got != 503 {
		t.Errorf("got status %d for overloaded, want 503", got)
	}
}

func TestAppendModelList(t *testing.T) {
	body := AppendModelList(nil, []Model{{ID: "a", Created: 1}, {ID: "b", Created: 2, OwnedBy: "me"}})
	var page struct {
		Object string      `json:"object"`
		Data   []oai.Model `json:"data"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if page.Object != "list" || len(page.Data) != 2 || page.Data[0].ID != "a" || page.Data[0].OwnedBy != "layer0" || page.Data[1].Created != 2 {
		t.Errorf("got %s", body)
	}
}

func TestIDs(t *testing.T) {
	tests := []struct {
		fn       func(string) string
		in, want string
	}{
		{ChatID, "msg_abc", "chatcmpl-abc"},
		{ChatID, "chatcmpl-x", "chatcmpl-x"},
		{ChatID, "other", "chatcmpl-other"},
		{CallID, "toolu_abc", "call_abc"},
		{CallID, "call_abc", "call_abc"},
		{CallID, "chatcmpl-tool-9", "chatcmpl-tool-9"},
	}
	for _, tt := range tests {
		if got := tt.fn(tt.in); got != tt.want {
			t.Errorf("got %q for %q, want %q", got, tt.in, tt.want)
		}
	}
	if id := ChatID(""); !strings.HasPrefix(id, "chatcmpl-") || len(id) != len("chatcmpl-")+24 {
		t.Errorf("got fresh id %q", id)
	}
}

// flushCounter counts the writes and flushes a stream writer makes.
type flushCounter struct {
	bytes.Buffer
	writes, flushes int
}

func (c *flushCounter) Write(p []byte) (int, error) { c.writes++; return c.Buffer.Write(p) }
func (c *flushCounter) Flush() error                { c.flushes++; return nil }

// A stream of many events and no Flush (an engine that hands them over at once, or never
// flushes) is written as the buffer fills, not collected whole: the buffer keeps its first size.
func TestStreamWriterBoundsItsBuffer(t *testing.T) {
	w := &flushCounter{}
	sw := NewStreamWriter(w)
	sw.ID, sw.Model = "chatcmpl-1", "m"
	for _, ev := range []*llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventBlockStart}} {
		if err := sw.Send(ev); err != nil {
			t.Fatal(err)
		}
	}
	delta := &llm.Event{Kind: llm.EventTextDelta, Text: strings.Repeat("x", 1000)}
	for range 200 {
		if err := sw.Send(delta); err != nil {
			t.Fatal(err)
		}
	}
	if w.writes == 0 || w.flushes != 0 {
		t.Errorf("after 200 KB without Flush: %d writes, %d flushes; want some writes and no flush", w.writes, w.flushes)
	}
	if cap(sw.buf) > 4096 {
		t.Errorf("buffer grew to %d bytes, want its first 4096", cap(sw.buf))
	}
	if err := sw.Send(&llm.Event{Kind: llm.EventStop, Stop: llm.StopEndTurn}); err != nil {
		t.Fatal(err)
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(w.String(), strings.Repeat("x", 1000)); n != 200 || !strings.HasSuffix(w.String(), "data: [DONE]\n\n") {
		t.Errorf("the stream holds %d of 200 deltas, ends %q", n, w.String()[max(0, w.Len()-20):])
	}
}
