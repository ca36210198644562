package responses

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// events splits an SSE body into its events' data, checking each event line names its type and
// that sequence numbers count from 0.
func events(t *testing.T, body string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok {
			t.Fatalf("event %q has no data", ev)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if "event: "+m["type"].(string) != name || m["sequence_number"] != float64(len(out)) {
			t.Fatalf("event %d: %q, type %v, sequence_number %v", len(out), name, m["type"], m["sequence_number"])
		}
		out = append(out, m)
	}
	return out
}

func types(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e["type"].(string)
	}
	return out
}

func sendAll(t *testing.T, s *StreamWriter, evs []llm.Event) {
	t.Helper()
	for i := range evs {
		if err := s.Send(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestStreamWriter(t *testing.T) {
	var buf bytes.Buffer
	m := &Meta{ID: "resp_1", CreatedAt: 1, Model: "m"}
	s := NewStreamWriter(m, &buf, nil)
	sendAll(t, s, []llm.Event{
		{Kind: llm.EventStart, ID: "msg_1", Model: "engine", Usage: llm.Usage{InputTokens: 5}},
		{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText},
		{Kind: llm.EventTextDelta, Index: 0, Text: "Hel"},
		{Kind: llm.EventTextDelta, Index: 0, Text: "lo"},
		{Kind: llm.EventBlockStop, Index: 0},
		{Kind: llm.EventBlockStart, Index: 1, Block: llm.BlockToolUse, ID: "toolu_7", Name: "f"},
		{Kind: llm.EventToolDelta, Index: 1, Text: `{"a":`},
		{Kind: llm.EventToolDelta, Index: 1, Text: `1}`},
		{Kind: llm.EventBlockStop, Index: 1},
		{Kind: llm.EventStop, Stop: llm.StopToolUse, Usage: llm.Usage{InputTokens: 5, CacheReadInputTokens: 2, OutputTokens: 7}},
	})
	evs := events(t, buf.String())
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	final := evs[len(evs)-1]["response"].(map[string]any)
	got := map[string]any{"status": final["status"], "model": final["model"], "usage": final["usage"], "output": final["output"]}
	msgID := evs[2]["item"].(map[string]any)["id"]
	fcID := evs[9]["item"].(map[string]any)["id"]
	wantFinal := map[string]any{"status": "completed", "model": "m",
		"usage": map[string]any{"input_tokens": 7.0, "input_tokens_details": map[string]any{"cached_tokens": 2.0}, "output_tokens": 7.0,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0.0}, "total_tokens": 14.0},
		"output": []any{
			map[string]any{"type": "message", "id": msgID, "status": "completed", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": "Hello", "annotations": []any{}, "logprobs": []any{}}}},
			map[string]any{"type": "function_call", "id": fcID, "call_id": "call_7", "name": "f", "arguments": `{"a":1}`, "status": "completed"},
		}}
	if diff := cmp.Diff(wantFinal, got); diff != "" {
		t.Errorf("final response (-want +got):\n%s", diff)
	}
	if !s.Done() || !bytes.Contains(s.Object(), []byte(`"status":"completed"`)) {
		t.Errorf("Done %v, Object %s", s.Done(), s.Object())
	}
}

func TestStreamWriterIncompleteAndError(t *testing.T) {
	var buf bytes.Buffer
	s := NewStreamWriter(&Meta{ID: "resp_1", Model: "m"}, &buf, nil)
	sendAll(t, s, []llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventStop, Stop: llm.StopMaxTokens}})
	evs := events(t, buf.String())
	last := evs[len(evs)-1]
	if last["type"] != "response.incomplete" || last["response"].(map[string]any)["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
		t.Errorf("got %v, want response.incomplete for max_output_tokens", last)
	}

	buf.Reset()
	s = NewStreamWriter(&Meta{ID: "resp_2", Model: "m"}, &buf, nil)
	sendAll(t, s, []llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventBlockStart, Block: llm.BlockText}, {Kind: llm.EventTextDelta, Text: "a"}})
	if err := s.WriteError(apierr.New(apierr.Overloaded, "busy")); err != nil {
		t.Fatal(err)
	}
	evs = events(t, buf.String())
	n := len(evs)
	if evs[n-2]["type"] != "error" || evs[n-2]["code"] != "server_is_overloaded" || evs[n-2]["message"] != "busy" {
		t.Errorf("got %v, want an error event", evs[n-2])
	}
	failed := evs[n-1]["response"].(map[string]any)
	if evs[n-1]["type"] != "response.failed" || failed["status"] != "failed" || failed["error"].(map[string]any)["code"] != "server_is_overloaded" {
		t.Errorf("got %v, want response.failed", evs[n-1])
	}
	if s.Done() || s.Send(&llm.Event{Kind: llm.EventStop}) == nil {
		t.Error("a failed stream took more events")
	}
}

func TestAppendResponse(t *testing.T) {
	temp := 0.2
	b := AppendResponse(nil, &llm.Response{Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}, Usage: llm.Usage{InputTokens: 3, OutputTokens: 1}},
		&Meta{ID: "resp_1", CreatedAt: 9, Model: "m", Extras: &Extras{Store: true, Temperature: &temp, Instructions: json.RawMessage(`"x"`)}})
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got["id"] != "resp_1" || got["object"] != "response" || got["status"] != "completed" || got["temperature"] != 0.2 ||
		got["instructions"] != "x" || got["created_at"] != 9.0 || got["error"] != nil {
		t.Errorf("got %s", b)
	}
	if d := AppendDeleted(nil, "resp_1"); string(d) != `{"id":"resp_1","object":"response.deleted","deleted":true}` {
		t.Errorf("got %s", d)
	}
}

// A text delta allocates nothing once the stream runs: the event is appended to the writer's
// buffer, and the answer's text to a builder that grows by doubling.
func TestStreamWriterDeltaAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := NewStreamWriter(&Meta{ID: "resp_1", Model: "m"}, io.Discard, nil)
	sendAll(t, s, []llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventBlockStart, Block: llm.BlockText}})
	ev := llm.Event{Kind: llm.EventTextDelta, Text: "token"}
	allocs := testing.AllocsPerRun(1000, func() {
		_ = s.Send(&ev)
		_ = s.Flush()
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per text delta, want 0", allocs)
	}
}

func TestParseUsage(t *testing.T) {
	u, ok := ParseUsage([]byte(`{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"total_tokens":13}`))
	if want := (llm.Usage{InputTokens: 6, CacheReadInputTokens: 4, OutputTokens: 3}); !ok || u != want {
		t.Errorf("got %+v %v, want %+v", u, ok, want)
	}
	if _, ok := ParseUsage([]byte(`null`)); ok {
		t.Error("null parsed as usage")
	}
}

// A stream of many events and no Flush is written as the buffer fills, not collected whole: the
// buffer keeps its first size, and every event still arrives, in order.
func TestStreamWriterBoundsItsBuffer(t *testing.T) {
	var buf bytes.Buffer
	s := NewStreamWriter(&Meta{ID: "resp_1", Model: "m"}, &buf, nil)
	for _, ev := range []*llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventBlockStart}} {
		if err := s.Send(ev); err != nil {
			t.Fatal(err)
		}
	}
	delta := &llm.Event{Kind: llm.EventTextDelta, Text: strings.Repeat("x", 1000)}
	for range 200 {
		if err := s.Send(delta); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() == 0 {
		t.Error("nothing was written after 200 KB of events without Flush")
	}
	if cap(s.buf) > 4096 {
		t.Errorf("buffer grew to %d bytes, want its first 4096", cap(s.buf))
	}
	for _, ev := range []*llm.Event{{Kind: llm.EventBlockStop}, {Kind: llm.EventStop, Stop: llm.StopEndTurn}} {
		if err := s.Send(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	evs := events(t, buf.String())
	if n := strings.Count(strings.Join(types(evs), " "), "response.output_text.delta"); n != 200 || types(evs)[len(evs)-1] != "response.completed" {
		t.Errorf("%d deltas of 200, last event %q", n, types(evs)[len(evs)-1])
	}
}
