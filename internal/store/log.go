package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger is a go-redis logger (for redis.SetLogger) that writes each of the client's lines
// — a failed dial, a connection dropped from the pool — as a WARN record of l, so that a process
// whose every stderr line is a JSON record stays so.
type Logger struct {
	// L receives the records. Required.
	L *slog.Logger
}

// Printf implements go-redis's logging interface.
func (r Logger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	r.L.WarnContext(ctx, "redis client", "detail", msg)
}
