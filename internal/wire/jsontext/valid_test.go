package jsontext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

var validCases = []string{
	`{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5, -3e10, 0, -0.0, 1E+2, true, false, null, "x\u00e9\n\"\\\/"]} `,
	`{"a":{"b":{"c":[{}]}}}`, `"s"`, `0`, `[[],[{}],{"":""}]`, "{\"a\":\"caf\xc3\xa9\"}",
	`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`,
}

var invalidCases = []string{
	``, ` `, `{`, `}`, `{"a":1`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1}}`, `{"a":1} x`, `[1,]`, `[1 2]`,
	`{"a":"unterminated}`, `{"a":tru}`, `{"a":nul}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`,
	`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, "{\"a\":\"line\nbreak\"}", `{"a":[1}`, `{"a":{1:2}}`, `{"a":1]`,
	`<html><body>error</body></html>`, `{"id":"msg_1","content":[{"type":"text","text":"hel`, "\x00\xff\x13garbage",
	`{"a":1}{"b":2}`, `{"a":+1}`, `{"a":NaN}`,
}

func TestValid(t *testing.T) {
	for _, c := range validCases {
		if !Valid([]byte(c)) || !json.Valid([]byte(c)) {
			t.Errorf("Valid(%q) = false, json.Valid = %v; want both true", c, json.Valid([]byte(c)))
		}
	}
	for _, c := range invalidCases {
		if Valid([]byte(c)) || json.Valid([]byte(c)) {
			t.Errorf("Valid(%q) = %v, json.Valid = %v; want both false", c, Valid([]byte(c)), json.Valid([]byte(c)))
		}
	}
	if !ValidObject([]byte(` {"a":1}`)) || ValidObject([]byte(`[1]`)) || ValidObject([]byte(`"s"`)) {
		t.Error("ValidObject accepts a non-object or refuses an object")
	}
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if !Valid([]byte(deep)) {
		t.Errorf("Valid refuses %d levels of nesting", maxDepth)
	}
	if Valid([]byte("[" + deep + "]")) {
		t.Errorf("Valid accepts %d levels of nesting", maxDepth+1)
	}
	if !raceEnabled {
		b := []byte(validCases[3])
		if n := testing.AllocsPerRun(100, func() { Valid(b) }); n != 0 {
			t.Errorf("Valid allocates %v times a call, want 0", n)
		}
	}
}

// FuzzValid checks Valid against encoding/json on arbitrary bytes.
func FuzzValid(f *testing.F) {
	for _, c := range append(append([]string{}, validCases...), invalidCases...) {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid = %v", b, got, want)
		}
		// ValidObject checks UTF-8 in the same pass: as a second pass over the whole text would.
		trimmed := bytes.TrimLeft(b, " \t\r\n")
		want := json.Valid(b) && utf8.Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
		if got := ValidObject(b); got != want {
			t.Fatalf("ValidObject(%q) = %v, want %v", b, got, want)
		}
	})
}

// BenchmarkValidObject is BenchmarkValid's answer checked as the pass-through checks it: whole
// and UTF-8.
func BenchmarkValidObject(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("The lighthouse keeper watched the sea. ", 40) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":300,"total_tokens":312}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !ValidObject(body) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkValid checks a 1.6 KB non-streamed Chat Completions answer.
func BenchmarkValid(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("The lighthouse keeper watched the sea. ", 40) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":300,"total_tokens":312}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid(body) {
			b.Fatal("invalid")
		}
	}
}

// ValidObject is what the pass-through path checks every answer and stream event with: one
// object, wholly valid, its strings UTF-8 (a client's decoder would turn other bytes into
// U+FFFD without a word).
func TestValidObject(t *testing.T) {
	tests := []struct {
		data string
		want bool
	}{
		{`{"a":1}`, true},
		{" {\"a\":1}\r\n", true},
		{"{\"a\":\"caf\xc3\xa9\"}", true},
		{`{"a":1`, false},
		{`{"a":,}`, false},
		{`{not json}`, false},
		{`[1]`, false},
		{`{`, false},
		{"\x8f\x00}", false},
		{"{\"a\":\"caf\xc3\"}", false},
		{"{\"a\":\"\xff\xfe\"}", false},
		{``, false},
	}
	for _, tt := range tests {
		if got := ValidObject([]byte(tt.data)); got != tt.want {
			t.Errorf("ValidObject(%q) = %v, want %v", tt.data, got, tt.want)
		}
	}
	if !raceEnabled {
		b := []byte(validCases[3])
		if n := testing.AllocsPerRun(100, func() { ValidObject(b) }); n != 0 {
			t.Errorf("ValidObject allocates %v times a call, want 0", n)
		}
	}
}

// FuzzValidObjectMembers checks that ValidObjectMembers is ValidObject and, for a valid object,
// visits the members Scan visits.
func FuzzValidObjectMembers(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(`{"a":1,"b":{"c":[1,{"d":2}]},"e\u0041":"x","f":[],"g":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		type m struct {
			K      string
			Esc    bool
			VS, VE int
		}
		var got, want []m
		ok := ValidObjectMembers(b, func(k []byte, esc bool, vs, ve int) { got = append(got, m{string(k), esc, vs, ve}) })
		if ok != ValidObject(b) {
			t.Fatalf("ValidObjectMembers(%q) = %v, ValidObject %v", b, ok, !ok)
		}
		if !ok {
			return
		}
		if err := Scan(b, func(k []byte, esc bool, vs, ve int) { want = append(want, m{string(k), esc, vs, ve}) }); err != nil {
			t.Fatalf("Scan(%q): %v", b, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ValidObjectMembers(%q) visited %v, Scan %v", b, got, want)
		}
	})
}

// FuzzMembers checks Members against ValidObjectMembers over two objects in a row, the second
// checked from the prefix it may share with the first.
func FuzzMembers(f *testing.F) {
	f.Add([]byte(`{"id":"x","model":"m","choices":[1]}`), []byte(`{"id":"x","model":"m","choices":[2]}`))
	f.Add([]byte(`{"id":"x","model":"m","choices":[1]}`), []byte(`{"id":"x","model":"m"}`))
	f.Add([]byte(`{"id":"x","model":"m","choices":[1]}`), []byte(`{"id":"x","model":"m","c":{`))
	f.Add([]byte(`{"a":1,"b":2}`), []byte(`{"a":1,"b":2 , "c" : "\ud800"}`))
	f.Add([]byte(`{"c":17,"d":1}`), []byte(`{"c":175,"d":1}`))
	f.Add([]byte(`{"c":17 ,"d":1}`), []byte(`{"c":17 }`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		type m struct {
			K      string
			Esc    bool
			VS, VE int
		}
		var p Members
		var got, want []m
		p.Valid(a, func([]byte, bool, int, int) {})
		ok := p.Valid(b, func(k []byte, esc bool, vs, ve int) { got = append(got, m{string(k), esc, vs, ve}) })
		wok := ValidObjectMembers(b, func(k []byte, esc bool, vs, ve int) { want = append(want, m{string(k), esc, vs, ve}) })
		if ok != wok {
			t.Fatalf("after %q, Members.Valid(%q) = %v, ValidObjectMembers %v", a, b, ok, wok)
		}
		if ok && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after %q, Members.Valid(%q) visited %v, want %v", a, b, got, want)
		}
	})
}

// TestMembersReset: a reset Members remembers nothing of the objects it checked (a pooled one
// starts the next stream as a new one would) and keeps its buffer.
func TestMembersReset(t *testing.T) {
	var p Members
	a := []byte(`{"id":"x","model":"m","choices":[1]}`)
	p.Valid(a, func([]byte, bool, int, int) {})
	if len(p.prefix) == 0 {
		t.Fatal("nothing remembered of the first object")
	}
	buf := &p.prefix[:1][0]
	p.Reset()
	if len(p.prefix) != 0 || p.n != 0 || p.rec != 0 || &p.prefix[:1][0] != buf {
		t.Fatalf("after Reset: prefix %q (cap %d), %d members, rec %d", p.prefix, cap(p.prefix), p.n, p.rec)
	}
	var got []string
	if !p.Valid(a, func(k []byte, _ bool, _, _ int) { got = append(got, string(k)) }) || fmt.Sprint(got) != "[id model choices]" {
		t.Fatalf("after Reset: visited %v", got)
	}
}
