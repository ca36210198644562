package cache

import (
	"container/list"
	"context"
	"sync"
	"time"
	"unsafe"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/owners"
)

// Entry is a stored answer: the canonical events of one complete, successful response, as the
// engine sent them (the start's message id cleared: every replay gets a fresh one).
type Entry struct {
	// Model is the model that served the answer (the upstream name the engine reported).
	Model string
	// Served is the configured model that served it, for the request's record.
	Served string
	// Engine is the replica that produced the answer, and Simulated whether it simulates.
	Engine    string
	Simulated bool
	// Events are the response's events, from the start to the stop. Never modified once the
	// entry is stored.
	Events []llm.Event
	// Usage is the stop event's usage: the original answer's counts.
	Usage llm.Usage
	// Stored is when the answer was stored.
	Stored time.Time
	// Request is the canonical encoding of the request it answers (Encode), which a lookup
	// compares: keys are short hashes, which can collide.
	Request []byte
	// Owner is the tenant whose answer it is (Canon.Tenant; "" when shared by every key).
	Owner string `json:",omitempty"`
}

// eventSize is what an event costs in memory beyond its strings.
const eventSize = int64(unsafe.Sizeof(llm.Event{}))

// Size is the entry's footprint in bytes, as the store's budget counts it: the events, their
// strings, the request's encoding, and a fixed overhead for the entry and its index.
func (e *Entry) Size() int64 {
	n := int64(unsafe.Sizeof(*e)) + 128 + int64(len(e.Model)+len(e.Served)+len(e.Engine)+len(e.Request))
	for i := range e.Events {
		ev := &e.Events[i]
		n += eventSize + int64(len(ev.ID)+len(ev.Name)+len(ev.Model)+len(ev.Text)+len(ev.StopSequence))
	}
	return n
}

// Store keeps entries by key for a time. Implementations are safe for concurrent use. An entry
// passed to Put, or returned by Get, is shared and must not be modified.
type Store interface {
	// Get returns the live entry under k, or false when there is none or it expired.
	Get(ctx context.Context, k Key) (*Entry, bool)
	// Put stores e under k for ttl, replacing what was there — or, in a store shared by
	// processes, keeping the first entry written (Model.Replace deletes first). A store may refuse
	// an entry (one larger than its whole budget); it is then simply not found later.
	Put(ctx context.Context, k Key, e *Entry, ttl time.Duration) error
	// Delete removes the entry under k, if any.
	Delete(ctx context.Context, k Key) error
}

// Memory is the in-process Store: entries within a budget of bytes (Entry.Size), in
// least-recently-used order per owner (Entry.Owner); storing past the budget evicts the least
// recently used entries of the owner holding the most bytes, so that one key filling the cache
// evicts its own answers, not every other key's. An expired entry is dropped when it is next
// looked up.
type Memory struct {
	now func() time.Time
	max int64

	mu     sync.Mutex
	bytes  int64
	byKey  map[Key]*list.Element
	owners owners.Set // each owner's entries (*memItem), most recently used first
}

type memItem struct {
	key     Key
	e       *Entry
	size    int64
	expires time.Time
	owner   *owners.Holding
}

// NewMemory returns an empty in-memory store of maxBytes, reading the time from now (time.Now
// when nil).
func NewMemory(maxBytes int64, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, max: maxBytes, byKey: map[Key]*list.Element{}}
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, k Key) (*Entry, bool) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byKey[k]
	if !ok {
		return nil, false
	}
	it := el.Value.(*memItem)
	if !now.Before(it.expires) {
		m.remove(el)
		return nil, false
	}
	it.owner.Entries.MoveToFront(el)
	return it.e, true
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, k Key, e *Entry, ttl time.Duration) error {
	size := e.Size()
	if size > m.max || ttl <= 0 {
		return nil
	}
	expires := m.now().Add(ttl)
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[k]; ok {
		m.remove(el)
	}
	o := m.owners.Of(e.Owner)
	o.Bytes += size // the newcomer counts as its owner's while the room is made
	for m.bytes+size > m.max {
		m.remove(m.owners.Largest().Entries.Back())
	}
	m.byKey[k] = o.Entries.PushFront(&memItem{key: k, e: e, size: size, expires: expires, owner: o})
	m.bytes += size
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, k Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[k]; ok {
		m.remove(el)
	}
	return nil
}

func (m *Memory) remove(el *list.Element) {
	it := el.Value.(*memItem)
	it.owner.Entries.Remove(el)
	it.owner.Bytes -= it.size
	delete(m.byKey, it.key)
	m.bytes -= it.size
	m.owners.Forget(it.e.Owner)
}

// Stats are a store's size now.
type Stats struct {
	Entries int
	Bytes   int64
}

// Stats returns the number of entries and the bytes they hold.
func (m *Memory) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{Entries: len(m.byKey), Bytes: m.bytes}
}
