package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Logger is a go-redis logger (for redis.SetLogger) that writes the client's lines — a failed
// dial, a connection dropped from the pool — as records of L, so that a process whose every
// stderr line is a JSON record stays so. While Redis is unreachable the client fails a dial on
// every probe (ten a second): one WARN record each LogEvery at most, saying how many lines it
// stands for, and the rest at DEBUG. The store's own WARN and INFO lines mark each change.
type Logger struct {
	// L receives the records. Required.
	L *slog.Logger

	mu         sync.Mutex
	last       time.Time // when the last WARN record was written
	suppressed int       // lines written at DEBUG since
}

// LogEvery is how often, at most, the go-redis client's lines are written at WARN.
const LogEvery = 10 * time.Second

// NewLogger returns a go-redis logger writing to l.
func NewLogger(l *slog.Logger) *Logger { return &Logger{L: l} }

// Printf implements go-redis's logging interface.
func (r *Logger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	now := time.Now()
	r.mu.Lock()
	warn := r.last.IsZero() || now.Sub(r.last) >= LogEvery
	n := r.suppressed
	if warn {
		r.last, r.suppressed = now, 0
	} else {
		r.suppressed++
	}
	r.mu.Unlock()
	if !warn {
		r.L.DebugContext(ctx, "redis client", "detail", msg)
		return
	}
	if n > 0 {
		r.L.WarnContext(ctx, "redis client", "detail", msg, "lines_at_debug_since_last", n)
		return
	}
	r.L.WarnContext(ctx, "redis client", "detail", msg)
}
