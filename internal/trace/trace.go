// Package trace keeps the decision traces of the last requests: what each stage of the pipeline
// decided for a request (key, limits, directives, cache, context cut, replica pick, attempts,
// fallbacks) and the times the request's Record holds. The server adds each request's Record to
// a Ring as the request ends, beside the access log; the operator reads a trace back by request
// id on the admin listener, and `layer0 debug` prints it one line per decision.
//
// Adding costs one copy of the Record under a mutex; the JSON is built only when a trace is read.
package trace

import (
	"strconv"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
)

// entry is one request as the ring keeps it: its Record, copied, and what the server adds.
type entry struct {
	rec      pipeline.Record
	method   string
	path     string
	duration time.Duration
}

// Ring is a bounded ring of the last requests' records, safe for concurrent use. A nil *Ring
// keeps nothing: Add on it returns at once.
type Ring struct {
	mu    sync.Mutex
	slots []entry
	next  int // the slot the next Add fills
	n     int // filled slots
}

// New returns a ring of the last n requests, or nil (keep nothing) when n ≤ 0.
func New(n int) *Ring {
	if n <= 0 {
		return nil
	}
	return &Ring{slots: make([]entry, n)}
}

// Len is the ring's capacity (0 for nil).
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.slots)
}

// Add keeps rec (copied: the caller may reuse it) with the request's method, path and total
// time, in place of the oldest request kept. It does not allocate.
func (r *Ring) Add(rec *pipeline.Record, method, path string, total time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	e := &r.slots[r.next]
	e.rec, e.method, e.path, e.duration = *rec, method, path, total
	r.next++
	if r.next == len(r.slots) {
		r.next = 0
	}
	if r.n < len(r.slots) {
		r.n++
	}
	r.mu.Unlock()
}

// Get returns the trace of the request with id, if the ring still holds it.
func (r *Ring) Get(id string) (*Trace, bool) {
	if r == nil || id == "" {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < r.n; i++ {
		e := &r.slots[r.index(i)]
		if e.rec.RequestID == id {
			return build(e), true
		}
	}
	return nil, false
}

// index is the slot of the i-th newest request.
func (r *Ring) index(i int) int {
	j := r.next - 1 - i
	if j < 0 {
		j += len(r.slots)
	}
	return j
}

// Filter selects requests in List. Zero fields select all.
type Filter struct {
	// Model matches the name asked for or the model that served.
	Model string
	// Status is an exact status ("529") or a class ("5xx").
	Status string
	// Limit bounds how many are returned; 0 means DefaultLimit.
	Limit int
	// Own, when set, keeps only the requests of the API key named Key ("" the caller without
	// a key): what a key that may read its own traces only is shown.
	Own bool
	Key string
}

// DefaultLimit is how many requests List returns when Filter.Limit is 0.
const DefaultLimit = 100

// Summary is one request in a list.
type Summary struct {
	ID        string    `json:"id"`
	Time      time.Time `json:"time"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Key       string    `json:"key,omitempty"`
	Model     string    `json:"model,omitempty"`
	Served    string    `json:"served,omitempty"`
	Engine    string    `json:"engine,omitempty"`
	Status    int       `json:"status"`
	ErrorType string    `json:"error_type,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	TotalMs   float64   `json:"total_ms"`
}

// List returns the requests f selects, newest first.
func (r *Ring) List(f Filter) []Summary {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	out := []Summary{}
	if r == nil {
		return out
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < r.n && len(out) < limit; i++ {
		e := &r.slots[r.index(i)]
		rec := &e.rec
		if f.Model != "" && rec.Model != f.Model && rec.Served != f.Model {
			continue
		}
		if f.Own && rec.Key != f.Key {
			continue
		}
		if f.Status != "" && !statusMatches(f.Status, rec.Status) {
			continue
		}
		out = append(out, Summary{ID: rec.RequestID, Time: rec.Start, Method: e.method, Path: e.path, Key: rec.Key,
			Model: rec.Model, Served: rec.Served, Engine: rec.Engine, Status: rec.Status, ErrorType: rec.ErrorType,
			Attempts: rec.Attempts, TotalMs: ms(e.duration)})
	}
	return out
}

// ValidStatus reports whether s is a status filter List understands: 100 to 599, or 1xx to 5xx.
func ValidStatus(s string) bool {
	if len(s) == 3 && s[1:] == "xx" {
		return s[0] >= '1' && s[0] <= '5'
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 100 && n <= 599
}

func statusMatches(s string, status int) bool {
	if len(s) == 3 && s[1:] == "xx" {
		return int(s[0]-'0') == status/100
	}
	n, err := strconv.Atoi(s)
	return err == nil && n == status
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
