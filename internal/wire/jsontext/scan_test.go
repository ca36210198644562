package jsontext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestField(t *testing.T) {
	tests := []struct {
		body, key, want string
		ok, err         bool
	}{
		{`{"model":"a","x":1}`, "model", `"a"`, true, false},
		{` { "x" : {"model":"inner"} , "model" : "outer" } `, "model", `"outer"`, true, false},
		{`{"messages":[{"content":"\"model\":\"fake\""}],"model":"m"}`, "model", `"m"`, true, false},
		{`{"mod\u0065l":"escaped"}`, "model", `"escaped"`, true, false},
		{`{"model":"a","model":"b"}`, "model", `"b"`, true, false},
		{`{"stream":true}`, "stream", `true`, true, false},
		{`{"n":-1.5e3}`, "n", `-1.5e3`, true, false},
		{`{"a":[1,{"b":"]"}],"c":null}`, "c", `null`, true, false},
		{`{}`, "model", ``, false, false},
		{`{"x":1}`, "model", ``, false, false},
		{`[1]`, "model", ``, false, true},
		{`{"model":"unterminated}`, "model", ``, false, true},
		{`{"a" 1}`, "a", ``, false, true},
		{`{"a":1,}`, "a", ``, false, true},
		{``, "a", ``, false, true},
	}
	for _, tt := range tests {
		s, e, ok, err := Field([]byte(tt.body), tt.key)
		if (err != nil) != tt.err || ok != tt.ok {
			t.Errorf("%s: got ok %v err %v, want ok %v err %v", tt.body, ok, err, tt.ok, tt.err)
			continue
		}
		if ok && tt.body[s:e] != tt.want {
			t.Errorf("%s: got %q, want %q", tt.body, tt.body[s:e], tt.want)
		}
	}
}

func TestScanArray(t *testing.T) {
	tests := []struct {
		arr  string
		want []string
		err  bool
	}{
		{`[]`, nil, false},
		{` [ ] `, nil, false},
		{`[1]`, []string{`1`}, false},
		{`[{"a":"]"}, "x,y" ,null,[1,[2]]]`, []string{`{"a":"]"}`, `"x,y"`, `null`, `[1,[2]]`}, false},
		{`{"a":1}`, nil, true},
		{`[1,]`, []string{`1`}, true},
		{`[1 2]`, []string{`1`}, true},
		{`[{"a":1}`, []string{`{"a":1}`}, true},
		{``, nil, true},
	}
	for _, tt := range tests {
		var got []string
		err := ScanArray([]byte(tt.arr), func(s, e int) { got = append(got, tt.arr[s:e]) })
		if (err != nil) != tt.err {
			t.Errorf("%s: got error %v, want error %v", tt.arr, err, tt.err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: elements (-want +got):\n%s", tt.arr, diff)
		}
	}
}

func TestInt(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"-7", -7, true}, {"9007199254740992", 1 << 53, true},
		{"9007199254740993", 0, false}, {"", 0, false}, {"-", 0, false}, {"01", 0, false},
		{"1.5", 0, false}, {"1e3", 0, false}, {"null", 0, false}, {`"3"`, 0, false}, {"12345678901234567", 0, false},
	}
	for _, tt := range tests {
		got, ok := Int([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("Int(%q): got %d %v, want %d %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// skipStringBytewise is skipString's definition, one byte at a time: a backslash escapes the
// byte after it, the first quote not escaped ends the string.
func skipStringBytewise(b []byte, i int) (int, bool) {
	esc := false
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			esc = true
			i++
		case '"':
			return i + 1, esc
		}
	}
	return -1, esc
}

// FuzzSkipString holds skipString, which searches many bytes at a time, to its definition.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`""`, `"a"`, `"a\"b"`, `"\\"`, `"\\\"`, `"abc`, `"a\`, `"\u0041"x`, `"` + strings.Repeat(`\\`, 40) + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		e, esc := skipString(b, 0)
		we, wesc := skipStringBytewise(b, 0)
		if e != we || (e >= 0 && esc != wesc) {
			t.Fatalf("skipString(%q) = %d, %v; want %d, %v", b, e, esc, we, wesc)
		}
	})
}

// BenchmarkScan finds the model of a 10 KB request (a 2,000-token prompt), as the pass-through
// path does for every request it forwards.
func BenchmarkScan(b *testing.B) {
	body := []byte(`{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat("The lighthouse keeper watched the sea. ", 260) + `"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := Field(body, "stream"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
