// Package accesslog writes one JSON record per request, the write off the request path: Write
// encodes the record on the request's goroutine with a hand-written appender (Append, about 200 ns, no allocation) into a bounded
// buffer and returns at once; one goroutine writes what has gathered in one write, then waits a
// moment (BatchDelay) so that under load many records share a write and a wakeup. When the
// buffer holds its bound of records the record is dropped and counted (Dropped), never silently
// lost and never blocking a request; a record whose write fails is counted as dropped too.
// Records carry no secrets: no keys, no prompt text.
package accesslog

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// Entry is one request's log record: the pipeline's Record plus what the server knows.
type Entry struct {
	pipeline.Record
	Method   string
	Path     string
	Key      string // the API key's name, never the key
	Duration time.Duration
}

// BatchDelay is how long the writer waits after a write before it looks at the queue again, so
// that records arriving meanwhile share the next write. At 10,000 requests a second that is
// about 20 records a write instead of one; a record waits at most this long to be written.
const BatchDelay = 2 * time.Millisecond

// maxBatch is the size past which a buffer a large batch grew is let go after it was written.
const maxBatch = 256 << 10

// Format is how records are written.
type Format uint8

// Formats of the records.
const (
	// JSON writes each record as one JSON object a line (Append).
	JSON Format = iota
	// Text writes each record as one line of key=value pairs, in Append's order (AppendText).
	Text
)

// Logger is an asynchronous access log: a request's record is encoded by the request's
// goroutine (Append, about 200 ns) into a shared buffer, and a writer goroutine writes the
// buffer when it holds records, then pauses BatchDelay so that the records arriving meanwhile
// share the next write. The zero value is not usable; use New.
type Logger struct {
	w       io.Writer
	format  Format
	size    int // the most records pending
	dropped atomic.Uint64
	written atomic.Uint64
	stopped atomic.Bool   // set by Close: later records are dropped
	quit    chan struct{} // closed by Close: run writes what is queued and ends
	done    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	pending []byte        // records encoded as JSON lines, not yet taken by the writer
	n       int           // records in pending
	closed  bool          // the writer took its last batch: pending is written no more
	kick    chan struct{} // a token when pending went from empty to not
}

// New starts a logger writing one line per record to w, in format f, with at most size records
// pending (default 8192 when 0).
func New(w io.Writer, size int, f Format) *Logger {
	if size <= 0 {
		size = 8192
	}
	l := &Logger{w: w, format: f, size: size, quit: make(chan struct{}), done: make(chan struct{}),
		kick: make(chan struct{}, 1), pending: make([]byte, 0, 64<<10)}
	go l.run()
	return l
}

// Write encodes e for writing, or drops and counts it when size records are pending or the
// logger is closed. Nothing of e is kept.
func (l *Logger) Write(e *Entry) {
	if l.stopped.Load() {
		l.dropped.Add(1)
		return
	}
	l.mu.Lock()
	if l.closed || l.n >= l.size { // closed: Close ran between the check above and the lock
		l.mu.Unlock()
		l.dropped.Add(1)
		return
	}
	l.pending = Append(l.pending, e)
	l.n++
	first := l.n == 1
	l.mu.Unlock()
	if first {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Dropped is the number of records dropped because the queue was full, the logger was closed
// or their write failed.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

// Written is the number of records written.
func (l *Logger) Written() uint64 { return l.written.Load() }

// Close writes what is queued and stops the logger; records written after it are dropped and
// counted (a record racing with Close is written or counted). It is safe to call more than once.
func (l *Logger) Close() {
	l.once.Do(func() {
		l.stopped.Store(true)
		close(l.quit)
	})
	<-l.done
}

// run is the writer goroutine: it waits for records, takes every record pending (swapping
// buffers with the writers), writes them in one write, and pauses for BatchDelay before the
// next round.
func (l *Logger) run() {
	defer close(l.done)
	spare := make([]byte, 0, 64<<10)
	var text []byte // the batch as key=value lines (format Text)
	for {
		closing := false
		select {
		case <-l.kick:
		case <-l.quit:
			closing = true
		}
		l.mu.Lock()
		batch, n := l.pending, l.n
		l.pending, l.n = spare[:0], 0
		l.closed = closing
		l.mu.Unlock()
		if n > 0 {
			out := batch
			if l.format == Text {
				text = text[:0]
				for line := range bytes.Lines(batch) {
					text = AppendText(text, line)
				}
				out = text
			}
			if _, err := l.w.Write(out); err != nil {
				l.dropped.Add(uint64(n))
			} else {
				l.written.Add(uint64(n))
			}
		}
		spare = batch
		if cap(spare) > 4*maxBatch {
			spare = make([]byte, 0, 64<<10)
		}
		if cap(text) > 4*maxBatch {
			text = nil
		}
		if closing {
			return
		}
		time.Sleep(BatchDelay)
	}
}

// Append appends e's record to dst as one line of JSON: the fields time (the request's end),
// level, msg, request_id, method, path, format, status, stream, model, engine, then the
// optional key, served_model, attempts, fallbacks, rate_limited, simulated, cache, directives,
// offload, context_before, context_after, turns_dropped, pick, pick_cached_tokens and pick_skipped
// (the prefix picker's reason, the prompt tokens it expected the chosen replica to hold, and the
// model's replicas it did not weigh, each "name:reason", space-separated), error_type and
// error, then input_tokens, output_tokens, cache_read_input_tokens, duration_ms, overhead_ms
// and ttft_ms (when a token came). Times are milliseconds with microsecond precision. It
// allocates nothing beyond growing dst (and what the error's Error method and the list of
// directives allocate).
func Append(dst []byte, e *Entry) []byte {
	r := &e.Record
	dst = append(dst, `{"time":"`...)
	dst = r.Start.Add(e.Duration).AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","level":"INFO","msg":"request","request_id":`...)
	dst = jsontext.AppendString(dst, r.RequestID)
	dst = appendStr(dst, "method", e.Method)
	dst = appendStr(dst, "path", e.Path)
	dst = appendStr(dst, "format", r.Format.String())
	dst = appendInt(dst, "status", r.Status)
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, r.Stream)
	dst = appendStr(dst, "model", r.Model)
	dst = appendStr(dst, "engine", r.Engine)
	if e.Key != "" {
		dst = appendStr(dst, "key", e.Key)
	}
	if r.Team != "" {
		dst = appendStr(dst, "team", r.Team)
	}
	if r.Served != "" && r.Served != r.Model {
		dst = appendStr(dst, "served_model", r.Served)
	}
	if r.Attempts > 1 {
		dst = appendInt(dst, "attempts", r.Attempts)
	}
	if len(r.Fallbacks) > 0 {
		dst = append(dst, `,"fallbacks":[`...)
		for i, f := range r.Fallbacks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsontext.AppendString(dst, f)
		}
		dst = append(dst, ']')
	}
	if r.RateLimited {
		dst = append(dst, `,"rate_limited":true`...)
	}
	if r.Simulated {
		dst = append(dst, `,"simulated":true`...)
	}
	if r.Cache != "" {
		dst = appendStr(dst, "cache", r.Cache)
	}
	if r.Directives != 0 {
		dst = appendStr(dst, "directives", r.Directives.String())
	}
	if r.Offload != "" {
		dst = appendStr(dst, "offload", r.Offload)
	}
	if cx := &r.Context; cx.Truncated {
		dst = appendInt(dst, "context_before", cx.Before)
		dst = appendInt(dst, "context_after", cx.After)
		dst = appendInt(dst, "turns_dropped", cx.TurnsDropped)
	}
	dst = appendPick(dst, &r.Pick)
	if r.ErrorType != "" {
		dst = appendStr(dst, "error_type", r.ErrorType)
	}
	if r.Cause != nil {
		dst = appendStr(dst, "error", r.Cause.Error())
	}
	dst = appendInt(dst, "input_tokens", r.Usage.InputTokens)
	dst = appendInt(dst, "output_tokens", r.Usage.OutputTokens)
	dst = appendInt(dst, "cache_read_input_tokens", r.Usage.CacheReadInputTokens)
	if n := r.Usage.CacheCreationInputTokens; n > 0 {
		dst = appendInt(dst, "cache_creation_input_tokens", n)
	}
	if r.Priced {
		// The cost as a decimal of the currency, exact: micro-units with six digits after the point.
		dst = append(dst, `,"cost":`...)
		dst = r.Cost.AppendDecimal(dst)
	}
	dst = appendMillis(dst, "duration_ms", e.Duration)
	dst = appendMillis(dst, "overhead_ms", e.Duration-r.EngineTime)
	if r.TTFT > 0 {
		dst = appendMillis(dst, "ttft_ms", r.TTFT)
	}
	return append(dst, '}', '\n')
}

// appendPick appends the replica picker's decision, when a picker made one: its reason, the
// prompt tokens it expected the chosen replica to hold, a hot prefix's replicas, and the
// replicas left out with why.
func appendPick(dst []byte, d *route.Decision) []byte {
	if d.Picker == "" || d.Chosen >= d.N {
		return dst
	}
	dst = appendStr(dst, "pick", d.Reason)
	dst = appendInt(dst, "pick_cached_tokens", d.Candidates[d.Chosen].Cached)
	if d.Spread > 0 {
		dst = appendInt(dst, "pick_spread", d.Spread) // the hot prefix's replicas
	}
	for i := range d.NSkipped {
		// "pick_skipped":"b:ejected c:tried" — the replicas left out, and why.
		if i == 0 {
			dst = append(dst, `,"pick_skipped":"`...)
		} else {
			dst = append(dst, ' ')
		}
		s := &d.Skipped[i]
		dst = appendEscaped(dst, s.Replica)
		dst = append(dst, ':')
		dst = append(dst, s.Reason...)
		if i == d.NSkipped-1 {
			dst = append(dst, '"')
		}
	}
	return dst
}

// appendStr appends ,"key":"value". Keys are plain ASCII.
func appendStr(dst []byte, key, v string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	dst = append(dst, '"', ':')
	return jsontext.AppendString(dst, v)
}

// appendEscaped appends v escaped as inside a JSON string, without its quotes.
func appendEscaped(dst []byte, v string) []byte {
	n := len(dst)
	dst = jsontext.AppendString(dst, v)
	// Drop the quotes AppendString put around v.
	copy(dst[n:], dst[n+1:len(dst)-1])
	return dst[:len(dst)-2]
}

func appendInt(dst []byte, key string, v int) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	dst = append(dst, '"', ':')
	return strconv.AppendInt(dst, int64(v), 10)
}

// appendMillis appends d as milliseconds with up to three decimals (whole microseconds),
// trailing zeros trimmed: 1.5, 0.018, 12.
func appendMillis(dst []byte, key string, d time.Duration) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	dst = append(dst, '"', ':')
	us := d.Microseconds()
	if us < 0 {
		dst = append(dst, '-')
		us = -us
	}
	dst = strconv.AppendInt(dst, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return dst
	}
	digits := [4]byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 4
	for digits[n-1] == '0' {
		n--
	}
	return append(dst, digits[:n]...)
}
