package gateway

import (
	"reflect"
	"sync/atomic"
)

// Shared is one component built from configuration — a replica, a picker, the Redis store, the
// telemetry provider, the stored responses — held by every generation that uses it. A
// generation built from a configuration whose part for the component is unchanged provisions it
// from its predecessor's instead of building another (provision); each generation holds what it
// uses while it is live and lets go once retired and unused, and the last holder to let go
// cleans the component up. That one rule is how every component outlives reloads.
type Shared[T any] struct {
	key     any // the configuration the value was built from, compared with reflect.DeepEqual
	value   T
	holders atomic.Int64
	cleanup func(T) // nil for a component with nothing to release
}

// Value returns the component.
func (s *Shared[T]) Value() T { return s.value }

func (s *Shared[T]) hold() { s.holders.Add(1) }

func (s *Shared[T]) letGo() {
	if s.holders.Add(-1) == 0 && s.cleanup != nil {
		s.cleanup(s.value)
	}
}

// holder is what a generation does with each Shared it uses, whatever its type.
type holder interface {
	hold()
	letGo()
}

// provision returns prev when it was built from a key equal to key (the component carries over),
// else a new component of build, cleaned up by cleanup once its last holder lets go.
func provision[T any](prev *Shared[T], key any, build func() (T, error), cleanup func(T)) (*Shared[T], error) {
	if prev != nil && reflect.DeepEqual(prev.key, key) {
		return prev, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	return &Shared[T]{key: key, value: v, cleanup: cleanup}, nil
}

// holdings is the set of components a generation holds.
type holdings []holder

// add records s as held (once the generation is committed); a nil s is skipped.
func add[T any](h *holdings, s *Shared[T]) *Shared[T] {
	if s != nil {
		*h = append(*h, s)
	}
	return s
}

// commit takes a hold of every component, for a generation that goes live.
func (h holdings) commit() {
	for _, s := range h {
		s.hold()
	}
}

// letGo lets go of every component: those no other generation holds are cleaned up.
func (h holdings) letGo() {
	for _, s := range h {
		s.letGo()
	}
}

// abandon is the end of a generation that never went live: the components built for it are
// cleaned up, and those provisioned from its predecessor stay with it — the same rule as a
// retired generation's, applied to a hold taken just for it.
func (h holdings) abandon() {
	h.commit()
	h.letGo()
}
