package jsontext

import (
	"errors"
	"slices"
	"strconv"
)

// KeySet is the set of member names seen so far in one JSON object, for decoders that refuse a
// name given twice: a body read last-wins by layer0 and first-wins by the engine it is passed
// to would be checked on one value and acted on with another. The zero value is an empty set.
// The first names are kept in place, compared one by one; past them a map takes over.
type KeySet struct {
	n     int
	small [16]string
	many  map[string]struct{}
}

// Add adds k and reports whether it was already in the set.
func (s *KeySet) Add(k string) (dup bool) {
	if s.many != nil {
		if _, dup = s.many[k]; !dup {
			s.many[k] = struct{}{}
		}
		return dup
	}
	for _, p := range s.small[:s.n] {
		if p == k {
			return true
		}
	}
	if s.n < len(s.small) {
		s.small[s.n] = k
		s.n++
		return false
	}
	s.many = make(map[string]struct{}, 4*len(s.small))
	for _, p := range s.small {
		s.many[p] = struct{}{}
	}
	s.many[k] = struct{}{}
	return false
}

// PathSeg is one step of the path to a value: an object member, or an array element when
// Index >= 0.
type PathSeg struct {
	Key   string
	Index int
}

// DuplicateKeyError is a member name given twice in one object. Path leads from the value
// SkipUnique was called on to the second occurrence, the repeated name last; Offset is where
// that occurrence's value starts.
type DuplicateKeyError struct {
	Offset int
	Path   []PathSeg
}

func (e *DuplicateKeyError) Error() string {
	return "jsontext: duplicate member name at byte offset " + strconv.Itoa(e.Offset)
}

// Key returns the repeated name.
func (e *DuplicateKeyError) Key() string { return e.Path[len(e.Path)-1].Key }

// SkipUnique is Skip that also refuses a member name given twice in any object of the value,
// at any depth, names compared after unescaping; the error is then a *DuplicateKeyError.
// Objects of up to sixteen members cost no allocation.
func (d *Scanner) SkipUnique(depth int) error {
	switch d.Peek() {
	case KindObject:
		if err := d.deeper(depth); err != nil {
			return err
		}
		var seen KeySet
		for n := 0; ; {
			k, ok, err := d.NextKey(&n)
			if err != nil || !ok {
				return err
			}
			if seen.Add(k) {
				return &DuplicateKeyError{Offset: d.Pos, Path: []PathSeg{{Key: k, Index: -1}}}
			}
			if err := d.SkipUnique(depth + 1); err != nil {
				return under(err, PathSeg{Key: k, Index: -1})
			}
		}
	case KindArray:
		if err := d.deeper(depth); err != nil {
			return err
		}
		for n := 0; ; {
			ok, err := d.NextElem(&n)
			if err != nil || !ok {
				return err
			}
			if err := d.SkipUnique(depth + 1); err != nil {
				return under(err, PathSeg{Index: n - 1})
			}
		}
	}
	return d.Skip(depth)
}

// under puts seg in front of the path of a *DuplicateKeyError; other errors pass unchanged.
func under(err error, seg PathSeg) error {
	var de *DuplicateKeyError
	if errors.As(err, &de) {
		de.Path = slices.Insert(de.Path, 0, seg)
	}
	return err
}
