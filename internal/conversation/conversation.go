// Package conversation keeps the Responses API's stored responses: for each response id, the
// response object a GET returns and the conversation a previous_response_id continues, owned by
// the API key that made it. Another key is told the id does not exist, exactly as for an id that
// never did. Entries are kept for a TTL, in this process's memory within a byte bound (Memory:
// beyond it the key holding the most goes first, its oldest entry), or in a Redis shared by
// every replica (Redis).
package conversation

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/owners"
)

// Entry is one stored response.
type Entry struct {
	// ID is the response id (resp_…).
	ID string `json:"id"`
	// Owner is the name of the API key that made it ("" without keys).
	Owner string `json:"owner"`
	// System is the system prompt of the conversation's input messages (not its instructions,
	// which a continuation does not inherit).
	System []llm.Block `json:"system,omitempty"`
	// Messages is the whole conversation, the response's own output last.
	Messages []llm.Message `json:"messages"`
	// Object is the response object, as GET /v1/responses/{id} returns it.
	Object json.RawMessage `json:"object"`
}

// Store keeps entries for their owners.
type Store interface {
	// Put stores e, replacing an entry of the same id. It keeps nothing of e itself: e's
	// strings may point into the request's body buffer, which the next request reuses (both
	// stores encode e as they put it).
	Put(ctx context.Context, e *Entry) error
	// Get returns the entry id of owner, or NotFound (for another owner's id too).
	Get(ctx context.Context, owner, id string) (*Entry, error)
	// Delete removes the entry id of owner, or returns NotFound.
	Delete(ctx context.Context, owner, id string) error
}

// Memory is a Store in this process's memory. The zero value is not usable; use NewMemory.
type Memory struct {
	ttl      time.Duration
	maxBytes int64
	now      func() time.Time

	mu     sync.Mutex
	byID   map[string]*list.Element
	order  list.List // of *stored, oldest first (insertion order is expiry order: one TTL)
	bytes  int64
	owners owners.Set // each owner's entries (their elements of order), oldest first
}

type stored struct {
	id      string
	owner   string
	val     []byte // the entry as JSON: a copy nothing else holds
	expires time.Time
	mine    *list.Element // in its owner's entries
}

// NewMemory returns a store keeping each entry for ttl, all of them within maxBytes (the JSON
// size of the entries); now is the clock (nil for time.Now).
func NewMemory(ttl time.Duration, maxBytes int64, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{ttl: ttl, maxBytes: maxBytes, now: now, byID: map[string]*list.Element{}}
}

// NotFound is the error for an id the caller cannot see: unknown, expired, deleted, or another
// key's.
func NotFound(id string) *apierr.Error {
	return &apierr.Error{Kind: apierr.NotFound, Param: "response_id",
		Message: fmt.Sprintf("response with id %.80q not found", id)}
}

// Put implements Store. An entry larger than the whole bound is not kept (a later Get finds
// nothing). Beyond the bound, the oldest entry of the owner holding the most bytes goes first:
// a key that stores much evicts its own entries, not every other key's.
func (s *Memory) Put(_ context.Context, e *Entry) error {
	val, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("conversation: encode %s: %w", e.ID, err)
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	if el, ok := s.byID[e.ID]; ok {
		s.removeLocked(el)
	}
	if int64(len(val)) > s.maxBytes {
		return nil
	}
	o := s.owners.Of(e.Owner)
	o.Bytes += int64(len(val)) // the newcomer counts as its owner's while the room is made
	for s.bytes+int64(len(val)) > s.maxBytes {
		s.removeLocked(s.owners.Largest().Entries.Front().Value.(*list.Element))
	}
	st := &stored{id: e.ID, owner: e.Owner, val: val, expires: now.Add(s.ttl)}
	el := s.order.PushBack(st)
	st.mine = o.Entries.PushBack(el)
	s.byID[e.ID] = el
	s.bytes += int64(len(val))
	return nil
}

// Get implements Store.
func (s *Memory) Get(_ context.Context, owner, id string) (*Entry, error) {
	now := s.now()
	s.mu.Lock()
	el, ok := s.byID[id]
	var val []byte
	if ok {
		st := el.Value.(*stored)
		switch {
		case !now.Before(st.expires):
			s.removeLocked(el)
			ok = false
		case st.owner != owner:
			ok = false
		default:
			val = st.val
		}
	}
	s.mu.Unlock()
	if !ok {
		return nil, NotFound(id)
	}
	return decode(id, val)
}

// decode decodes a stored entry.
func decode(id string, val []byte) (*Entry, error) {
	e := new(Entry)
	if err := json.Unmarshal(val, e); err != nil {
		return nil, fmt.Errorf("conversation: decode %s: %w", id, err)
	}
	unsetInputs(e.System)
	for i := range e.Messages {
		unsetInputs(e.Messages[i].Content)
	}
	return e, nil
}

// unsetInputs gives the blocks without a tool input (encoded as null) back their nil Input.
func unsetInputs(bs []llm.Block) {
	for i := range bs {
		if string(bs[i].Input) == "null" {
			bs[i].Input = nil
		}
		unsetInputs(bs[i].Content)
	}
}

// Delete implements Store.
func (s *Memory) Delete(_ context.Context, owner, id string) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return NotFound(id)
	}
	st := el.Value.(*stored)
	if !now.Before(st.expires) {
		s.removeLocked(el)
		return NotFound(id)
	}
	if st.owner != owner {
		return NotFound(id)
	}
	s.removeLocked(el)
	return nil
}

// Len returns the number of entries held (expired ones included until they are swept) and
// their bytes.
func (s *Memory) Len() (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len(), s.bytes
}

// expireLocked drops the expired entries, oldest first.
func (s *Memory) expireLocked(now time.Time) {
	for el := s.order.Front(); el != nil && !now.Before(el.Value.(*stored).expires); el = s.order.Front() {
		s.removeLocked(el)
	}
}

func (s *Memory) removeLocked(el *list.Element) {
	st := el.Value.(*stored)
	s.order.Remove(el)
	delete(s.byID, st.id)
	s.bytes -= int64(len(st.val))
	o := s.owners.Of(st.owner)
	o.Entries.Remove(st.mine)
	o.Bytes -= int64(len(st.val))
	s.owners.Forget(st.owner)
}
