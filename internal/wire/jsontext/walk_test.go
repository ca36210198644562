package jsontext

import (
	"errors"
	"slices"
	"testing"
)

// TestPathDeep checks a path deeper than the segments held in place: each segment reads back as
// it was entered, and leaving and entering again past them reuses the slice.
func TestPathDeep(t *testing.T) {
	var p Path
	var want []PathSeg
	for i := range 30 {
		if i%2 == 0 {
			p.Enter(string(rune('a' + i)))
			want = append(want, PathSeg{Key: string(rune('a' + i)), Index: -1})
		} else {
			p.EnterIndex(i)
			want = append(want, PathSeg{Index: i})
		}
	}
	if got := p.Segments(nil); !slices.Equal(got, want) {
		t.Fatalf("Segments = %v, want %v", got, want)
	}
	for i, sg := range want {
		if got := p.Seg(i); got != sg {
			t.Errorf("Seg(%d) = %v, want %v", i, got, sg)
		}
	}
	for range 20 {
		p.Leave()
	}
	p.Enter("x")
	want = append(want[:10], PathSeg{Key: "x", Index: -1})
	if got := p.Segments(nil); p.Depth() != 11 || !slices.Equal(got, want) {
		t.Errorf("after leaving: depth %d, Segments = %v, want %v", p.Depth(), got, want)
	}
}

// walkAll reads the value at w's position whole, calling visit before each value it meets.
func walkAll(w *Walker, visit func()) error {
	visit()
	switch w.Peek() {
	case KindObject:
		w.Pos++
		return w.Members(func(string) error { return walkAll(w, visit) })
	case KindArray:
		w.Pos++
		return w.Elems(func() error { return walkAll(w, visit) })
	}
	return w.Skip(w.Depth())
}

// TestWalkerPath checks the path each value is read at, and that an error leaves the path
// where it was met: at the object whose member name is broken, at the element that failed.
func TestWalkerPath(t *testing.T) {
	w := Walker{Scanner: Scanner{Text: `{"a":[1,{"b":true}],"c":null}`}}
	var seen []string
	value := func() error {
		return walkAll(&w, func() {
			var b []byte
			for _, sg := range w.Segments(nil) {
				if sg.Index >= 0 {
					b = append(b, '0'+byte(sg.Index))
				} else {
					b = append(b, sg.Key...)
				}
				b = append(b, '/')
			}
			seen = append(seen, string(b))
		})
	}
	if err := value(); err != nil || w.Depth() != 0 {
		t.Fatalf("got %v at depth %d, want nil at 0", err, w.Depth())
	}
	want := []string{"", "a/", "a/0/", "a/1/", "a/1/b/", "c/"}
	if !slices.Equal(seen, want) {
		t.Errorf("paths %q, want %q", seen, want)
	}

	w = Walker{Scanner: Scanner{Text: `{"a":[1,{"b" true}]}`}}
	seen = nil
	var se *SyntaxError
	if err := value(); !errors.As(err, &se) {
		t.Fatalf("got %v, want a syntax error", err)
	}
	if got := w.Segments(nil); !slices.Equal(got, []PathSeg{{Key: "a", Index: -1}, {Index: 1}}) {
		t.Errorf("the error left the path at %v, want a.1", got)
	}

	stop := errors.New("stop")
	w = Walker{Scanner: Scanner{Text: `[0,[1]]`}}
	w.Pos++
	err := w.Elems(func() error {
		if w.Peek() == KindArray {
			w.Pos++
			return w.Elems(func() error { return stop })
		}
		return w.Skip(w.Depth())
	})
	if err != stop || !slices.Equal(w.Segments(nil), []PathSeg{{Index: 1}, {Index: 0}}) {
		t.Errorf("got %v at %v, want stop at 1.0", err, w.Segments(nil))
	}
}

// TestWalkerAllocs checks that walking a body of shallow paths allocates nothing.
func TestWalkerAllocs(t *testing.T) {
	text := `{"a":[1,{"b":[true,{"c":"x"}]}],"d":{"e":{"f":null}}}`
	var w Walker
	n := testing.AllocsPerRun(100, func() {
		w = Walker{Scanner: Scanner{Text: text}}
		if err := walkAll(&w, func() {}); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
