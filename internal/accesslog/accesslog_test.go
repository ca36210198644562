package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
)

func TestWritesOneJSONRecordPerEntry(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, 16)
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

// blockingWriter holds the writer goroutine so the queue fills.
type blockingWriter struct {
	release chan struct{}
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	<-w.release
	return len(b), nil
}

func TestFullQueueDropsAndCounts(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	l := New(w, 2)
	// One record is taken by the writer (blocked), two fill the queue, the rest are dropped.
	for range 10 {
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

func BenchmarkWrite(b *testing.B) {
	l := New(io.Discard, 1<<16)
	defer l.Close()
	e := &Entry{Record: pipeline.Record{RequestID: "L0-x", Status: 200}, Method: "POST", Path: "/v1/messages"}
	b.ReportAllocs()
	for b.Loop() {
		l.Write(e)
	}
}
