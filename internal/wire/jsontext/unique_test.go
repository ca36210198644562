package jsontext

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSkipUnique(t *testing.T) {
	var many strings.Builder
	for i := range 40 {
		fmt.Fprintf(&many, `"k%d":%d,`, i, i)
	}
	for _, tc := range []struct {
		name, in string
		want     []PathSeg // nil: no duplicate
	}{
		{"flat", `{"a":1,"b":2}`, nil},
		{"same name in two objects", `{"a":{"x":1},"b":{"x":1}}`, nil},
		{"case differs", `{"a":1,"A":2}`, nil},
		{"top", `{"a":1,"a":2}`, []PathSeg{{Key: "a", Index: -1}}},
		{"escaped", `{"a":1,"\u0061":2}`, []PathSeg{{Key: "a", Index: -1}}},
		{"nested", `{"a":[0,{"b":{"c":1,"c":2}}]}`, []PathSeg{{Key: "a", Index: -1}, {Index: 1}, {Key: "b", Index: -1}, {Key: "c", Index: -1}}},
		{"past sixteen members", `{` + many.String() + `"k35":0}`, []PathSeg{{Key: "k35", Index: -1}}},
		{"forty distinct", `{` + many.String() + `"z":0}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Scanner{Text: tc.in}
			err := d.SkipUnique(0)
			var de *DuplicateKeyError
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != nil && !errors.As(err, &de):
				t.Fatalf("got %v, want a *DuplicateKeyError", err)
			case tc.want != nil:
				if diff := cmp.Diff(tc.want, de.Path); diff != "" {
					t.Fatalf("path (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestSkipUniqueAllocs(t *testing.T) {
	d := Scanner{}
	in := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"input":{"a":{"b":[1,2,{"c":null}]}}}`
	if n := testing.AllocsPerRun(100, func() {
		d = Scanner{Text: in}
		_ = d.SkipUnique(0)
	}); n != 0 {
		t.Errorf("SkipUnique allocates %v times, want 0", n)
	}
}

// FuzzSkipUnique holds SkipUnique to Skip: it accepts what Skip accepts unless an object
// repeats a name, which it reports (possibly before a syntax error further on) with a path that
// ends at that name.
func FuzzSkipUnique(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":1,"b":2}]}`, `{"a":1,"\u0061":2}`, `[{"x":{}},{"x":{}}]`, `{"a":{"a":{}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := Scanner{Text: string(data), MaxDepth: 100}
		skipErr := d.Skip(0)
		d = Scanner{Text: string(data), MaxDepth: 100}
		err := d.SkipUnique(0)
		var de *DuplicateKeyError
		if errors.As(err, &de) {
			if len(de.Path) == 0 || de.Path[len(de.Path)-1].Index >= 0 {
				t.Fatalf("%q: duplicate %+v, Skip said %v", data, de.Path, skipErr)
			}
			return
		}
		if (err == nil) != (skipErr == nil) {
			t.Fatalf("%q: SkipUnique %v, Skip %v", data, err, skipErr)
		}
	})
}
