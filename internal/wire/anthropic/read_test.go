package anthropic

import (
	"errors"
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

// eventLog is a sink that records events (copied) and flushes.
type eventLog struct {
	events  []llm.Event
	flushes int
	failAt  int // Send fails on this event (1-based) when set
}

var errSinkFull = errors.New("sink full")

func (l *eventLog) Send(ev *llm.Event) error {
	l.events = append(l.events, *ev)
	if len(l.events) == l.failAt {
		return errSinkFull
	}
	return nil
}

func (l *eventLog) Flush() error { l.flushes++; return nil }

// sse builds a stream from (event, data) pairs.
func sseStream(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString("event: " + pairs[i] + "\ndata: " + pairs[i+1] + "\n\n")
	}
	return b.String()
}

const (
	startData = `{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude-up","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"cache_creation_input_tokens":1,"cache_read_input_tokens":2,"output_tokens":1,"service_tier":"standard"}}}`
	stopData  = `{"type":"message_stop"}`
)

func TestReadStream(t *testing.T) {
	start := llm.Event{Kind: llm.EventStart, ID: "msg_up", Model: "claude-up", Usage: llm.Usage{InputTokens: 9, OutputTokens: 1, CacheCreationInputTokens: 1, CacheReadInputTokens: 2}}
	tests := []struct {
		name     string
		stream   string
		want     []llm.Event
		wantKind apierr.Kind // when an error is wanted
		wantErr  string      // a substring of its message; "" for no error
	}{
		{
			name: "text with thinking and a server tool skipped and renumbered",
			stream: sseStream(
				"message_start", startData,
				"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
				"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
				"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`,
				"content_block_stop", `{"type":"content_block_stop","index":0}`,
				"ping", `{"type": "ping"}`,
				"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
				"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi \u00e9"}}`,
				"content_block_stop", `{"type":"content_block_stop","index":1}`,
				"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
				"content_block_stop", `{"index":2,"type":"content_block_stop"}`,
				"some_future_event", `{"type":"some_future_event","x":[1,2]}`,
				"content_block_start", `{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`,
				"content_block_delta", `{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
				"content_block_delta", `{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"1}"}}`,
				"content_block_stop", `{"type":"content_block_stop","index":3}`,
				"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":15}}`,
				"message_stop", stopData,
			),
			want: []llm.Event{
				start,
				{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText},
				{Kind: llm.EventTextDelta, Index: 0, Text: "Hi é"},
				{Kind: llm.EventBlockStop, Index: 0},
				{Kind: llm.EventBlockStart, Index: 1, Block: llm.BlockToolUse, ID: "toolu_1", Name: "f"},
				{Kind: llm.EventToolDelta, Index: 1, Text: `{"a":`},
				{Kind: llm.EventToolDelta, Index: 1, Text: `1}`},
				{Kind: llm.EventBlockStop, Index: 1},
				{Kind: llm.EventStop, Stop: llm.StopToolUse, Usage: llm.Usage{InputTokens: 9, OutputTokens: 15, CacheCreationInputTokens: 1, CacheReadInputTokens: 2}},
			},
		},
		{
			name: "CRLF, comments, data without a space, a data line split in two, no trailing blank line",
			stream: ": keep-alive\r\nevent: message_start\r\ndata:" + startData + "\r\n\r\n" +
				"event: message_delta\r\ndata: {\"type\":\"message_delta\",\r\ndata: \"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},\"usage\":{\"output_tokens\":3,\"input_tokens\":10}}\r\n\r\n" +
				"event: message_stop\r\ndata: {\"type\":\"message_stop\"}",
			want: []llm.Event{start, {Kind: llm.EventStop, Stop: llm.StopSequence, StopSequence: "END",
				Usage: llm.Usage{InputTokens: 10, OutputTokens: 3, CacheCreationInputTokens: 1, CacheReadInputTokens: 2}}},
		},
		{
			name: "stop reasons the canonical model lacks",
			stream: sseStream("message_start", startData,
				"message_delta", `{"type":"message_delta","delta":{"stop_reason":"model_context_window_exceeded"},"usage":{"output_tokens":2}}`,
				"message_stop", stopData),
			want: []llm.Event{start, {Kind: llm.EventStop, Stop: llm.StopMaxTokens,
				Usage: llm.Usage{InputTokens: 9, OutputTokens: 2, CacheCreationInputTokens: 1, CacheReadInputTokens: 2}}},
		},
		{
			name: "error event mid-way",
			stream: sseStream("message_start", startData,
				"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
			want:     []llm.Event{start, {Kind: llm.EventBlockStart, Block: llm.BlockText}},
			wantKind: apierr.Overloaded, wantErr: "Overloaded",
		},
		{
			name:     "error event of an unknown type",
			stream:   sseStream("error", `{"type":"error","error":{"type":"brand_new_error","message":"what"}}`),
			wantKind: apierr.BadGateway, wantErr: "what",
		},
		{
			name: "truncated: no message_stop",
			stream: sseStream("message_start", startData,
				"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`),
			want: []llm.Event{start, {Kind: llm.EventBlockStart, Block: llm.BlockText},
				{Kind: llm.EventTextDelta, Text: "Hel"}},
			wantKind: apierr.BadGateway, wantErr: "ended early",
		},
		{
			name:     "truncated inside an event",
			stream:   sseStream("message_start", startData) + "event: message_stop\ndata: {\"type\":\"mess",
			want:     []llm.Event{start},
			wantKind: apierr.BadGateway, wantErr: "invalid stream",
		},
		{
			name:     "empty body",
			stream:   "",
			wantKind: apierr.BadGateway, wantErr: "ended early",
		},
		{
			name:     "event before message_start",
			stream:   sseStream("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text"}}`),
			wantKind: apierr.BadGateway, wantErr: "invalid stream",
		},
		{
			name:     "delta for a block never started",
			stream:   sseStream("message_start", startData, "content_block_delta", `{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"x"}}`),
			want:     []llm.Event{start},
			wantKind: apierr.BadGateway, wantErr: "invalid stream",
		},
		{
			name:     "block event without an index",
			stream:   sseStream("message_start", startData, "content_block_stop", `{"type":"content_block_stop"}`),
			want:     []llm.Event{start},
			wantKind: apierr.BadGateway, wantErr: "invalid stream",
		},
		{
			name:     "data that is not JSON",
			stream:   sseStream("message_start", `{"type":"message_start",`),
			wantKind: apierr.BadGateway, wantErr: "invalid stream",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log eventLog
			err := ReadStream(strings.NewReader(tt.stream), &log)
			if diff := cmp.Diff(tt.want, log.events); diff != "" {
				t.Errorf("events mismatch (-want +got):\n%s", diff)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				return
			}
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got error %v, want an *apierr.Error", err)
			}
			if e.Kind != tt.wantKind || !strings.Contains(e.Message, tt.wantErr) {
				t.Errorf("got kind %d message %q, want kind %d message containing %q", e.Kind, e.Message, tt.wantKind, tt.wantErr)
			}
		})
	}
}

func TestReadStreamTruncationCause(t *testing.T) {
	err := ReadStream(strings.NewReader(sseStream("message_start", startData)), &eventLog{})
	if !errors.Is(err, errTruncated) {
		t.Errorf("got %v, want it to wrap %v", err, errTruncated)
	}
}

// chunkReader returns one chunk per Read, so the reader's buffer empties between chunks.
type chunkReader struct {
	chunks []string
	err    error // returned after the chunks; io.EOF when nil
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if n == len(c.chunks[0]) {
		c.chunks = c.chunks[1:]
	} else {
		c.chunks[0] = c.chunks[0][n:]
	}
	return n, nil
}

func TestReadStreamFlushesBeforeBlocking(t *testing.T) {
	events, err := os.ReadFile(filepath.Join("testdata", "text_stream.golden"))
	if err != nil {
		t.Fatal(err)
	}
	all := string(events)
	parts := strings.SplitAfter(all, "\n\n")

	// Everything at once: one flush, at message_stop.
	var log eventLog
	if err := ReadStream(strings.NewReader(all), &log); err != nil {
		t.Fatal(err)
	}
	if log.flushes != 1 {
		t.Errorf("one read: got %d flushes, want 1", log.flushes)
	}

	// One event per read: a flush after each event that sent something (not after ping), and
	// one at the end.
	log = eventLog{}
	if err := ReadStream(&chunkReader{chunks: parts}, &log); err != nil {
		t.Fatal(err)
	}
	if want := len(log.events); log.flushes != want {
		t.Errorf("one event per read: got %d flushes, want %d (one per event sent)", log.flushes, want)
	}
}

// hookReader calls before ahead of each Read from r.
type hookReader struct {
	r      io.Reader
	before func()
}

func (h *hookReader) Read(p []byte) (int, error) { h.before(); return h.r.Read(p) }

func TestReadStreamFlushesMidEvent(t *testing.T) {
	// The first read ends half-way through the second event: the first must be flushed before
	// ReadStream waits for the rest.
	all := sseStream("message_start", startData, "message_stop", stopData)
	cut := len(sseStream("message_start", startData)) + 10
	cr := &chunkReader{chunks: []string{all[:cut], all[cut:]}}
	var log eventLog
	reads := 0
	var flushesAtSecondRead int
	hr := &hookReader{r: cr, before: func() {
		reads++
		if reads == 2 {
			flushesAtSecondRead = log.flushes
		}
	}}
	if err := ReadStream(hr, &log); err != nil {
		t.Fatal(err)
	}
	if flushesAtSecondRead != 1 {
		t.Errorf("flushes before the read that completes the second event: got %d, want 1", flushesAtSecondRead)
	}
	if log.flushes != 2 {
		t.Errorf("total flushes: got %d, want 2", log.flushes)
	}
}

func TestReadStreamErrors(t *testing.T) {
	broken := errors.New("connection reset")
	err := ReadStream(&chunkReader{chunks: []string{sseStream("message_start", startData)}, err: broken}, &eventLog{})
	if !errors.Is(err, broken) {
		t.Errorf("read error: got %v, want it to wrap %v", err, broken)
	}

	err = ReadStream(strings.NewReader(sseStream("message_start", startData)), &eventLog{failAt: 1})
	if !errors.Is(err, errSinkFull) {
		t.Errorf("sink error: got %v, want %v", err, errSinkFull)
	}

	huge := "data: " + strings.Repeat("x", sse.MaxEvent+1) + "\n\n"
	err = ReadStream(strings.NewReader(huge), &eventLog{})
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.BadGateway {
		t.Errorf("oversized event: got %v, want a 502 *apierr.Error", err)
	}
}

func TestReadResponse(t *testing.T) {
	body := `{"id":"msg_01","type":"message","role":"assistant","model":"claude-up",
		"content":[{"type":"thinking","thinking":"…","signature":"s"},
			{"type":"text","text":"Checking.","citations":null},
			{"type":"tool_use","id":"toolu_9","name":"get_weather","input":{ "city" : "Paris" }}],
		"stop_reason":"tool_use","stop_sequence":null,
		"usage":{"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":12,"server_tool_use":null}}`
	var c llm.Collector
	if err := ReadResponse([]byte(body), &c); err != nil {
		t.Fatalf("ReadResponse: got error %v, want none", err)
	}
	want := llm.Response{
		ID: "msg_01", Model: "claude-up",
		Content: []llm.Block{
			{Type: llm.BlockText, Text: "Checking."},
			{Type: llm.BlockToolUse, ID: "toolu_9", Name: "get_weather", Input: []byte(`{"city":"Paris"}`)},
		},
		Stop:  llm.StopToolUse,
		Usage: llm.Usage{InputTokens: 20, OutputTokens: 12, CacheReadInputTokens: 5},
	}
	if diff := cmp.Diff(want, c.Response); diff != "" {
		t.Errorf("ReadResponse mismatch (-want +got):\n%s", diff)
	}

	// AppendResponse and ReadResponse are inverses.
	var back llm.Collector
	if err := ReadResponse(AppendResponse(nil, &c.Response, ""), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c.Response, back.Response); diff != "" {
		t.Errorf("AppendResponse→ReadResponse mismatch (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name, body string
		kind       apierr.Kind
	}{
		{"error body", `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, apierr.RateLimit},
		{"not JSON", `<html>`, apierr.BadGateway},
		{"not a message", `{"type":"completion"}`, apierr.BadGateway},
		{"trailing garbage", `{"type":"message"} x`, apierr.BadGateway},
	} {
		err := ReadResponse([]byte(tt.body), &llm.Collector{})
		var e *apierr.Error
		if !errors.As(err, &e) || e.Kind != tt.kind {
			t.Errorf("%s: got %v, want an *apierr.Error of kind %d", tt.name, err, tt.kind)
		}
	}
}

func TestDecodeError(t *testing.T) {
	tests := []struct {
		status   int
		body     string
		wantKind apierr.Kind
		wantMsg  string
	}{
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: field required"},"request_id":"req_1"}`, apierr.InvalidRequest, "messages: field required"},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, apierr.Authentication, "invalid x-api-key"},
		{403, `{"type":"error","error":{"type":"permission_error","message":"no"}}`, apierr.Permission, "no"},
		{404, `{"type":"error","error":{"type":"not_found_error","message":"model: x"}}`, apierr.NotFound, "model: x"},
		{413, `{"type":"error","error":{"type":"request_too_large","message":"big"}}`, apierr.RequestTooLarge, "big"},
		{429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`, apierr.RateLimit, "slow"},
		{500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, apierr.BadGateway, "Internal server error"},
		{504, `{"type":"error","error":{"type":"timeout_error","message":"late"}}`, apierr.Timeout, "late"},
		{529, `{"error":{"message":"Overloaded","type":"overloaded_error"},"type":"error"}`, apierr.Overloaded, "Overloaded"},
		{402, `{"type":"error","error":{"type":"billing_error","message":"pay"}}`, apierr.API, "pay"},
		{502, `<html>Bad Gateway</html>`, apierr.BadGateway, "the engine returned HTTP 502"},
		{503, ``, apierr.Overloaded, "the engine returned HTTP 503"},
		{500, `{"type":"error","error":{"type":"api_error"}}`, apierr.BadGateway, "the engine returned HTTP 500"},
	}
	for _, tt := range tests {
		e := DecodeError(tt.status, []byte(tt.body))
		if e.Kind != tt.wantKind || e.Message != tt.wantMsg {
			t.Errorf("DecodeError(%d, %q): got kind %d message %q, want %d %q", tt.status, tt.body, e.Kind, e.Message, tt.wantKind, tt.wantMsg)
		}
		if e.Cause == nil {
			t.Errorf("DecodeError(%d, %q): got no cause, want one for the log", tt.status, tt.body)
		}
	}
}

func FuzzReadStream(f *testing.F) {
	for _, name := range []string{"text_stream.golden", "tool_use_stream.golden", "error_stream.golden"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		var log eventLog
		err := ReadStream(strings.NewReader(string(stream)), &log)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Message == "" {
				t.Fatalf("got error %v, want an *apierr.Error with a message", err)
			}
			return
		}
		if n := len(log.events); n < 2 || log.events[0].Kind != llm.EventStart || log.events[n-1].Kind != llm.EventStop {
			t.Fatalf("a stream read without error must run from EventStart to EventStop, got %+v", log.events)
		}
		// The events must encode again: a StreamWriter accepts them all.
		sw := NewStreamWriter("msg_1", io.Discard, nil)
		for i := range log.events {
			if err := sw.Send(&log.events[i]); err != nil {
				t.Fatalf("StreamWriter.Send(%+v): %v", log.events[i], err)
			}
		}
	})
}

// nopSink discards events.
type nopSink struct{}

func (nopSink) Send(*llm.Event) error { return nil }
func (nopSink) Flush() error          { return nil }

func BenchmarkReadStreamTextDelta(b *testing.B) {
	const deltas = 1000
	var sb strings.Builder
	sb.WriteString(sseStream("message_start", startData,
		"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	for range deltas {
		sb.WriteString(sseStream("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}`))
	}
	sb.WriteString(sseStream("content_block_stop", `{"type":"content_block_stop","index":0}`,
		"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1000}}`,
		"message_stop", stopData))
	stream := sb.String()
	r := strings.NewReader(stream)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(stream)
		if err := ReadStream(r, nopSink{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/delta")
}
