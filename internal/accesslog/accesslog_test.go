package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/route"
)

func TestWritesOneJSONRecordPerEntry(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, 16, JSON)
	for i := range 3 {
		l.Write(&Entry{Record: pipeline.Record{RequestID: "L0-" + string(rune('a'+i)), Status: 200, Model: "sim",
			Cause: errors.New("engine: boom")}, Method: "POST", Path: "/v1/messages", Key: "team-a", Duration: time.Millisecond})
	}
	l.Close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &rec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"request_id": "L0-c", "status": 200.0, "key": "team-a", "error": "engine: boom", "duration_ms": 1.0} {
		if rec[k] != want {
			t.Errorf("%s: got %v, want %v", k, rec[k], want)
		}
	}
	if l.Written() != 3 || l.Dropped() != 0 {
		t.Errorf("written %d dropped %d, want 3 and 0", l.Written(), l.Dropped())
	}
}

// TestWriteAfterClose checks that a record written after Close (a request ending after the
// gateway closed) is dropped and counted, not a panic, and that Close may be called twice.
func TestWriteAfterClose(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, 16, JSON)
	l.Write(&Entry{Record: pipeline.Record{RequestID: "L0-a", Status: 200}})
	l.Close()
	l.Write(&Entry{Record: pipeline.Record{RequestID: "L0-b", Status: 200}})
	l.Close()
	if l.Written() != 1 || l.Dropped() != 1 || strings.Count(buf.String(), "\n") != 1 {
		t.Errorf("written %d dropped %d, log %q: want 1, 1 and the first record", l.Written(), l.Dropped(), buf.String())
	}
}

// blockingWriter holds the writer goroutine so the queue fills; entered receives a token when
// a write has begun (nil: none is sent).
type blockingWriter struct {
	release chan struct{}
	entered chan struct{}
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	if w.entered != nil {
		w.entered <- struct{}{}
	}
	<-w.release
	return len(b), nil
}

func TestFullQueueDropsAndCounts(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	l := New(w, 2, JSON)
	// One record is taken by the writer (blocked: it is waited for, or the writer could take
	// two), two fill the queue, the rest are dropped.
	l.Write(&Entry{Record: pipeline.Record{RequestID: "x"}})
	<-w.entered
	for range 9 {
		l.Write(&Entry{Record: pipeline.Record{RequestID: "x"}})
	}
	close(w.release)
	l.Close()
	if got := l.Written() + l.Dropped(); got != 10 {
		t.Errorf("written+dropped: got %d, want 10", got)
	}
	if l.Dropped() < 7 {
		t.Errorf("dropped: got %d, want at least 7", l.Dropped())
	}
}

// BenchmarkWrite: a record's cost on the request's goroutine (encoding it), in bursts of 256
// that the writer takes between bursts, as at 10,000 requests a second with BatchDelay.
func BenchmarkWrite(b *testing.B) {
	l := New(io.Discard, 1<<16, JSON)
	defer l.Close()
	e := &Entry{Record: pipeline.Record{RequestID: "L0-x", Status: 200, Model: "m", Engine: "e"}, Method: "POST",
		Path: "/v1/messages"}
	b.ReportAllocs()
	n := uint64(0)
	for b.Loop() {
		l.Write(e)
		if n++; n%256 == 0 {
			b.StopTimer()
			for l.Written()+l.Dropped() < n {
				time.Sleep(100 * time.Microsecond)
			}
			b.StartTimer()
		}
	}
	if l.Dropped() != 0 {
		b.Fatalf("%d records dropped", l.Dropped())
	}
}

// update regenerates the golden files: go test ./internal/accesslog -update
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// entries covers every optional field, escaping, and the millisecond formatting.
func entries() []Entry {
	start := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	return []Entry{
		{Record: pipeline.Record{RequestID: "L0-minimal", Start: start, Status: 200, Model: "sim", Engine: "sim"},
			Method: "POST", Path: "/v1/messages", Duration: 1500 * time.Microsecond},
		{Record: pipeline.Record{RequestID: "L0-full", Start: start, Format: llm.FormatOpenAI, Stream: true, Status: 503,
			Model: "alias", Served: "fallback", Engine: "vllm-2", Attempts: 3, Fallbacks: []string{"overloaded", "timeout"},
			RateLimited: true, Simulated: true, Cache: "miss", ErrorType: "overloaded_error",
			Cause: errors.New("engine \"x\": said <no> & \x01\n\xff"), Usage: llm.Usage{InputTokens: 12, OutputTokens: 34, CacheReadInputTokens: 5},
			TTFT: 18 * time.Microsecond, EngineTime: 2 * time.Second,
			Pick: route.Decision{Picker: "prefix", Reason: "spread", Spread: 3, PromptTokens: 4000, Chosen: 1, N: 2,
				Candidates: [route.MaxDecisionReplicas]route.Candidate{{Replica: "vllm-1", Cached: 3984}, {Replica: "vllm-2", Cached: 2048}},
				NSkipped:   2, Skipped: [route.MaxDecisionReplicas]route.Skip{{Replica: "vllm-\"3", Reason: route.SkipEjected},
					{Replica: "vllm-4", Reason: route.SkipTried}}}},
			Method: "POST", Path: "/v1/chat/completions", Key: "team-a", Duration: 2*time.Second + 10*time.Millisecond},
		{Record: pipeline.Record{RequestID: "L0-overhead-negative", Start: start, Format: llm.FormatBinary, Status: 200,
			Model: "m", Served: "m", EngineTime: 3*time.Millisecond + 500*time.Microsecond},
			Method: "GET", Path: "/v1/models", Duration: 2*time.Millisecond + 999*time.Microsecond + 999},
	}
}

func TestAppendGolden(t *testing.T) {
	var got []byte
	for _, e := range entries() {
		got = Append(got, &e)
	}
	path := filepath.Join("testdata", "records.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("records differ from %s (-want +got):\n%s", path, diff)
	}
}

// TestAppendFields decodes each record and checks its fields' values: the names and meaning
// the log had when log/slog wrote it.
func TestAppendFields(t *testing.T) {
	es := entries()
	want := []map[string]any{
		{"time": "2026-11-29T12:00:00.124956789Z", "level": "INFO", "msg": "request", "request_id": "L0-minimal",
			"method": "POST", "path": "/v1/messages", "format": "anthropic", "status": 200.0, "stream": false,
			"model": "sim", "engine": "sim", "input_tokens": 0.0, "output_tokens": 0.0, "cache_read_input_tokens": 0.0,
			"duration_ms": 1.5, "overhead_ms": 1.5},
		{"time": "2026-11-29T12:00:02.133456789Z", "level": "INFO", "msg": "request", "request_id": "L0-full",
			"method": "POST", "path": "/v1/chat/completions", "format": "openai", "status": 503.0, "stream": true,
			"model": "alias", "engine": "vllm-2", "key": "team-a", "served_model": "fallback", "attempts": 3.0,
			"fallbacks": []any{"overloaded", "timeout"}, "rate_limited": true, "simulated": true, "cache": "miss",
			"pick": "spread", "pick_cached_tokens": 2048.0, "pick_spread": 3.0, "pick_skipped": "vllm-\"3:ejected vllm-4:tried",
			"error_type": "overloaded_error", "error": "engine \"x\": said <no> & \x01\n\ufffd",
			"input_tokens": 12.0, "output_tokens": 34.0, "cache_read_input_tokens": 5.0,
			"duration_ms": 2010.0, "overhead_ms": 10.0, "ttft_ms": 0.018},
		{"time": "2026-11-29T12:00:00.126456788Z", "level": "INFO", "msg": "request", "request_id": "L0-overhead-negative",
			"method": "GET", "path": "/v1/models", "format": "binary", "status": 200.0, "stream": false,
			"model": "m", "engine": "", "input_tokens": 0.0, "output_tokens": 0.0, "cache_read_input_tokens": 0.0,
			"duration_ms": 2.999, "overhead_ms": -0.5},
	}
	for i := range es {
		line := Append(nil, &es[i])
		if n := bytes.Count(line, []byte("\n")); n != 1 || line[len(line)-1] != '\n' {
			t.Errorf("%s: got %d newlines, want one at the end: %q", es[i].RequestID, n, line)
		}
		var got map[string]any
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%s: %v in %s", es[i].RequestID, err, line)
		}
		if diff := cmp.Diff(want[i], got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", es[i].RequestID, diff)
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	es := entries()
	es[1].Cause = nil // an error's Error method may allocate; the appender must not
	buf := make([]byte, 0, 4096)
	for i := range es {
		if n := testing.AllocsPerRun(100, func() { buf = Append(buf[:0], &es[i]) }); n != 0 {
			t.Errorf("%s: got %v allocations, want 0", es[i].RequestID, n)
		}
	}
}

// countingWriter counts the writes it gets and the records in them.
type countingWriter struct {
	mu             sync.Mutex
	writes, events int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	w.events += bytes.Count(b, []byte("\n"))
	return len(b), nil
}

// TestBatchesWrites checks that records queued together share one write, and that Close writes
// everything queued.
func TestBatchesWrites(t *testing.T) {
	w := &countingWriter{}
	l := New(w, 1000, JSON)
	for range 500 {
		l.Write(&Entry{Record: pipeline.Record{RequestID: "x"}})
	}
	l.Close()
	if w.events != 500 || l.Written() != 500 {
		t.Errorf("got %d records in the output and %d counted written, want 500", w.events, l.Written())
	}
	if w.writes > 10 {
		t.Errorf("got %d writes for 500 records queued at once, want at most 10", w.writes)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFailedWriteCountsDropped(t *testing.T) {
	l := New(failingWriter{}, 16, JSON)
	for range 5 {
		l.Write(&Entry{Record: pipeline.Record{RequestID: "x"}})
	}
	l.Close()
	if l.Written() != 0 || l.Dropped() != 5 {
		t.Errorf("written %d dropped %d, want 0 and 5", l.Written(), l.Dropped())
	}
}

// FuzzAppend checks that any strings make one valid JSON line that decodes to them (invalid
// UTF-8 aside, which becomes U+FFFD).
func FuzzAppend(f *testing.F) {
	f.Add("L0-x", "/v1/messages", "team", "boom \"quoted\"\n", int64(1500))
	f.Fuzz(func(t *testing.T, id, path, key, cause string, us int64) {
		e := Entry{Record: pipeline.Record{RequestID: id, Cause: errors.New(cause), Start: time.Unix(0, 0).UTC()},
			Path: path, Key: key, Duration: time.Duration(us) * time.Microsecond}
		line := Append(nil, &e)
		if bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("got %q, want one line", line)
		}
		var got struct {
			RequestID string  `json:"request_id"`
			Path      string  `json:"path"`
			Key       *string `json:"key"`
			Error     string  `json:"error"`
			Duration  float64 `json:"duration_ms"`
		}
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%v in %q", err, line)
		}
		valid := func(s string) string { // each invalid byte becomes one U+FFFD
			var b strings.Builder
			for _, r := range s {
				b.WriteRune(r)
			}
			return b.String()
		}
		if got.RequestID != valid(id) || got.Path != valid(path) || got.Error != valid(cause) {
			t.Errorf("got %q %q %q, want %q %q %q", got.RequestID, got.Path, got.Error, id, path, cause)
		}
		if (got.Key != nil) != (key != "") || (got.Key != nil && *got.Key != valid(key)) {
			t.Errorf("got key %v, want %q", got.Key, key)
		}
		if want := float64(us) / 1000; math.Abs(got.Duration-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("got duration_ms %v, want %v", got.Duration, want)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	es := entries()
	e := &es[0]
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], e)
	}
}

// TestWriteRacingCloseIsCounted: every record is either written or counted as dropped, also
// those whose Write runs while Close does (a request ending during shutdown): none is left in a
// buffer no writer will take.
func TestWriteRacingCloseIsCounted(t *testing.T) {
	for round := range 1000 {
		var buf bytes.Buffer
		l := New(&buf, 1<<20, JSON)
		var wg sync.WaitGroup
		var attempts [4]int
		start := make(chan struct{})
		for g := range attempts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 200; i++ {
					l.Write(&Entry{Record: pipeline.Record{RequestID: "L0-r", Status: 200}})
					attempts[g]++
				}
			}()
		}
		close(start)
		l.Close()
		wg.Wait()
		total := uint64(attempts[0] + attempts[1] + attempts[2] + attempts[3])
		if got := l.Written() + l.Dropped(); got != total {
			t.Fatalf("round %d: %d records written and %d dropped of %d: %d lost uncounted",
				round, l.Written(), l.Dropped(), total, total-got)
		}
		if lines := uint64(strings.Count(buf.String(), "\n")); lines != l.Written() {
			t.Fatalf("round %d: %d lines in the log, %d counted written", round, lines, l.Written())
		}
	}
}
