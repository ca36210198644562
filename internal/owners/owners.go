// Package owners keeps what each owner (a tenant: an API key's name) holds in a store bounded in
// bytes, so that the store, when full, evicts from the largest holder first: one tenant filling
// it evicts its own entries, not every other tenant's. The in-memory response cache and the
// stored responses use it. Not safe for concurrent use: the store's lock guards it.
package owners

import "container/list"

// Holding is what one owner holds: its entries, in the order its store keeps them (the store
// says which end it evicts from), and their bytes.
type Holding struct {
	Entries list.List
	Bytes   int64
}

// Set is a store's holdings, by owner. The zero value is ready to use.
type Set struct{ m map[string]*Holding }

// Of returns owner's holding, a new one when the owner holds nothing.
func (s *Set) Of(owner string) *Holding {
	h := s.m[owner]
	if h == nil {
		if s.m == nil {
			s.m = map[string]*Holding{}
		}
		h = &Holding{}
		s.m[owner] = h
	}
	return h
}

// Largest returns the holding of the most bytes among those holding an entry (a store making
// room for an entry counts it in its owner's Bytes first), nil when none holds one. It reads
// every holding: the stores call it only when full.
func (s *Set) Largest() *Holding {
	var big *Holding
	for _, h := range s.m {
		if h.Entries.Len() > 0 && (big == nil || h.Bytes > big.Bytes) {
			big = h
		}
	}
	return big
}

// Forget drops owner's holding if it holds nothing.
func (s *Set) Forget(owner string) {
	if h := s.m[owner]; h != nil && h.Entries.Len() == 0 && h.Bytes == 0 {
		delete(s.m, owner)
	}
}
