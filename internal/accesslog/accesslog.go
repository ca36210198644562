// Package accesslog writes one JSON record per request, off the request path: Write hands the
// record to a bounded queue and returns at once; one goroutine encodes with log/slog. When the
// queue is full the record is dropped and counted (Dropped), never silently lost and never
// blocking a request. Records carry no secrets: no keys, no prompt text.
package accesslog

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
)

// Entry is one request's log record: the pipeline's Record plus what the server knows.
type Entry struct {
	pipeline.Record
	Method   string
	Path     string
	Key      string // the API key's name, never the key
	Duration time.Duration
}

// Logger is an asynchronous access log. The zero value is not usable; use New.
type Logger struct {
	ch      chan Entry
	log     *slog.Logger
	dropped atomic.Uint64
	written atomic.Uint64
	done    chan struct{}
	once    sync.Once
}

// New starts a logger writing JSON lines to w with a queue of size entries (default 8192 when 0).
func New(w io.Writer, size int) *Logger {
	if size <= 0 {
		size = 8192
	}
	l := &Logger{
		ch:   make(chan Entry, size),
		log:  slog.New(slog.NewJSONHandler(w, nil)),
		done: make(chan struct{}),
	}
	go l.run()
	return l
}

// Write queues e for writing, or drops and counts it when the queue is full.
func (l *Logger) Write(e *Entry) {
	select {
	case l.ch <- *e:
	default:
		l.dropped.Add(1)
	}
}

// Dropped is the number of records dropped because the queue was full.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

// Written is the number of records written.
func (l *Logger) Written() uint64 { return l.written.Load() }

// Close writes what is queued and stops the logger. Write must not be called after Close.
func (l *Logger) Close() {
	l.once.Do(func() { close(l.ch) })
	<-l.done
}

func (l *Logger) run() {
	defer close(l.done)
	attrs := make([]slog.Attr, 0, 28)
	for e := range l.ch {
		attrs = appendAttrs(attrs[:0], &e)
		l.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
		l.written.Add(1)
	}
}

func appendAttrs(a []slog.Attr, e *Entry) []slog.Attr {
	r := &e.Record
	a = append(a,
		slog.String("request_id", r.RequestID),
		slog.String("method", e.Method),
		slog.String("path", e.Path),
		slog.String("format", r.Format.String()),
		slog.Int("status", r.Status),
		slog.Bool("stream", r.Stream),
		slog.String("model", r.Model),
		slog.String("engine", r.Engine),
	)
	if e.Key != "" {
		a = append(a, slog.String("key", e.Key))
	}
	if r.Served != "" && r.Served != r.Model {
		a = append(a, slog.String("served_model", r.Served))
	}
	if r.Attempts > 1 {
		a = append(a, slog.Int("attempts", r.Attempts))
	}
	if len(r.Fallbacks) > 0 {
		a = append(a, slog.Any("fallbacks", r.Fallbacks))
	}
	if r.RateLimited {
		a = append(a, slog.Bool("rate_limited", true))
	}
	if r.Simulated {
		a = append(a, slog.Bool("simulated", true))
	}
	if r.ErrorType != "" {
		a = append(a, slog.String("error_type", r.ErrorType))
	}
	if r.Cause != nil {
		a = append(a, slog.String("error", r.Cause.Error()))
	}
	a = append(a,
		slog.Int("input_tokens", r.Usage.InputTokens),
		slog.Int("output_tokens", r.Usage.OutputTokens),
		slog.Int("cache_read_input_tokens", r.Usage.CacheReadInputTokens),
		slog.Float64("duration_ms", ms(e.Duration)),
		slog.Float64("overhead_ms", ms(e.Duration-r.EngineTime)),
	)
	if r.TTFT > 0 {
		a = append(a, slog.Float64("ttft_ms", ms(r.TTFT)))
	}
	return a
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
