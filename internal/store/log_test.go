package store

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestLoggerBoundsWarnings: a burst of the client's lines (a failed dial on every probe while
// Redis is away) makes one WARN record, the rest DEBUG; the next WARN says how many it stands for.
func TestLoggerBoundsWarnings(t *testing.T) {
	var buf bytes.Buffer
	l := NewLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := context.Background()
	for range 20 {
		l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %s", 1, "connection refused")
	}
	out := buf.String()
	if w, d := strings.Count(out, `"level":"WARN"`), strings.Count(out, `"level":"DEBUG"`); w != 1 || d != 19 {
		t.Fatalf("20 lines at once: %d WARN, %d DEBUG records; want 1 and 19:\n%s", w, d, out)
	}
	if !strings.Contains(out, `"detail":"connection pool: failed to dial after 1 attempts: connection refused"`) {
		t.Errorf("the record lacks the client's line:\n%s", out)
	}
	buf.Reset()
	l.mu.Lock()
	l.last = l.last.Add(-LogEvery)
	l.mu.Unlock()
	l.Printf(ctx, "redis: again")
	if out := buf.String(); !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, `"lines_at_debug_since_last":19`) {
		t.Errorf("after LogEvery: %s, want a WARN counting the 19 lines at DEBUG", out)
	}
}
