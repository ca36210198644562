package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestScannerStr(t *testing.T) {
	long := strings.Repeat("plain ascii text, ", 20)
	tests := []struct {
		in, want, err string
	}{
		{`"abc"`, "abc", ""},
		{`"` + long + `"`, long, ""},
		{`"` + long + `é` + long + `"`, long + "é" + long, ""},
		{`"a\nb\"c\\d\/e\tf"`, "a\nb\"c\\d/e\tf", ""},
		{`"` + long + `\n` + long + `"`, long + "\n" + long, ""},
		{`"\u00e9\ud83d\ude00"`, "é😀", ""},
		{`"\ud83d x"`, "\uFFFD x", ""},
		{`"\ud83d\u0041"`, "\uFFFDA", ""},
		{`"abc`, "", "jsontext: invalid JSON at byte offset 4: unterminated string"},
		{`"ab\`, "", "jsontext: invalid JSON at byte offset 4: unterminated string"},
		{"\"a\x01\"", "", "jsontext: invalid JSON at byte offset 2: control character in string"},
		{`"a\x"`, "", "jsontext: invalid JSON at byte offset 2: invalid escape in string"},
		{`"a\u12g4"`, "", `jsontext: invalid JSON at byte offset 2: invalid \u escape in string`},
		{"\"" + long + "\xff\"", "", "jsontext: invalid JSON at byte offset 361: string is not valid UTF-8"},
	}
	for _, tt := range tests {
		d := Scanner{Text: tt.in}
		got, err := d.Str()
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("Str(%.40q) error %v, want %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want || d.Pos != len(tt.in) {
			t.Errorf("Str(%.40q) = %q, %v at %d; want %q at %d", tt.in, got, err, d.Pos, tt.want, len(tt.in))
		}
	}
}

func TestScannerNumber(t *testing.T) {
	for in, want := range map[string]string{
		"0": "", "-12.5e+3": "", "1E9": "", "-": "invalid number", "01": "", "1.": "invalid number: no digits after the decimal point",
		"1e": "invalid number: no digits in the exponent", "1e+": "invalid number: no digits in the exponent",
	} {
		d := Scanner{Text: in}
		_, err := d.Number()
		if (err == nil) != (want == "") || err != nil && !strings.HasSuffix(err.Error(), want) {
			t.Errorf("Number(%q): %v, want %q", in, err, want)
		}
	}
}

// FuzzScanner holds the Scanner to encoding/json: it accepts exactly the valid JSON whose
// strings are UTF-8, agrees with Valid on it, and reads a string as json.Unmarshal does.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"d\u00e9"}`, `"x\ud800y"`, `[1e5,-0.5,true,false]`,
		`{"a":"b",}`, "\"\x7f\xc3\xa9\"", `  "\\\""  `, `[`, `01`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := Scanner{Text: string(data), MaxDepth: 100}
		err := d.Skip(0)
		if err == nil {
			err = d.End()
		}
		want := json.Valid(data) && utf8.Valid(data) && strings.Count(string(data), "[")+strings.Count(string(data), "{") < 100
		if want && err != nil {
			t.Fatalf("Scanner refuses %q: %v", data, err)
		}
		if err == nil && !json.Valid(data) {
			t.Fatalf("Scanner accepts %q, which encoding/json refuses", data)
		}
		if err == nil && !Valid(data) {
			t.Fatalf("Scanner accepts %q, which Valid refuses", data)
		}
		d = Scanner{Text: string(data)}
		if d.Peek() != KindString {
			return
		}
		got, err := d.Str()
		if err != nil || d.End() != nil {
			return
		}
		var std string
		if err := json.Unmarshal(data, &std); err != nil || std != got {
			t.Fatalf("Str(%q) = %q, encoding/json %q (%v)", data, got, std, err)
		}
	})
}

// FuzzScannerAnyBytes holds a Scanner with AnyBytes to encoding/json: it accepts exactly the
// valid JSON, strings that are not UTF-8 included, and reads keys raw as NextKey reads them.
func FuzzScannerAnyBytes(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"d\u00e9"}`, "{\"\xff\":\"\xfe\"}", "[\"\xc3\"]", `{"a\"b":1,"c":{}}`,
		"{\"a\":\"\x01\"}", `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := Scanner{Text: string(data), MaxDepth: 100, AnyBytes: true}
		err := d.Skip(0)
		if err == nil {
			err = d.End()
		}
		nest := strings.Count(string(data), "[")+strings.Count(string(data), "{") < 100
		if json.Valid(data) && nest && err != nil {
			t.Fatalf("Scanner refuses %q: %v", data, err)
		}
		if err == nil && !json.Valid(data) {
			t.Fatalf("Scanner accepts %q, which encoding/json refuses", data)
		}
		// NextRawKey finds the names NextKey decodes, and leaves the scanner where it does.
		raw, keyed := Scanner{Text: string(data), AnyBytes: true}, Scanner{Text: string(data), AnyBytes: true}
		if raw.Peek() != KindObject {
			return
		}
		raw.Pos++
		keyed.Pos = raw.Pos
		for n, m := 0, 0; ; {
			r, esc, ok, err := raw.NextRawKey(&n)
			k, ok2, err2 := keyed.NextKey(&m)
			if ok != ok2 || (err == nil) != (err2 == nil) || raw.Pos != keyed.Pos || n != m {
				t.Fatalf("%q: NextRawKey %q, %v, %v at %d; NextKey %q, %v, %v at %d", data, r, ok, err, raw.Pos, k, ok2, err2, keyed.Pos)
			}
			if err != nil || !ok {
				return
			}
			if esc != strings.Contains(r, `\`) || !esc && r != k || esc && string(unescape(nil, r)) != k {
				t.Fatalf("%q: NextRawKey %q (esc %v), NextKey %q", data, r, esc, k)
			}
			if raw.Skip(1) != nil {
				return
			}
			keyed.Pos = raw.Pos
		}
	})
}

// foldFields is a struct whose fields' names differ ignoring case, to see which one
// encoding/json matches a name to.
type foldFields struct {
	A int `json:"prompt_tokens"`
	B int `json:"ks"`
	C int `json:"é_ǆ"`
}

var foldNames = [...]string{"prompt_tokens", "ks", "é_ǆ"}

func TestKeyFolds(t *testing.T) {
	for _, tt := range []struct {
		raw, name string
		want      bool
	}{
		{"prompt_tokens", "prompt_tokens", true},
		{"PROMPT_Tokens", "prompt_tokens", true},
		{`prompt\u005Ftokens`, "prompt_tokens", true},
		{`\u0050rompt_tokens`, "prompt_tokens", true},
		{"\u212a\u017f", "ks", true},
		{`\u212A\u017F`, "ks", true},
		{"prompt_token", "prompt_tokens", false},
		{"prompt_tokens_", "prompt_tokens", false},
		{"prompt-tokens", "prompt_tokens", false},
		{"\u0130", "i", false}, // İ lowers to i, but is not in its simple fold orbit
		{"É_ǅ", "é_ǆ", true},
		{"\xff", "\uFFFD", true},
		{`\ud800`, "\uFFFD", true},
		{`\ud83d\ude00`, "\U0001F600", true},
		{`\ud83d\ude00`, "\uFFFD\uFFFD", false},
		{"", "", true},
		{"", "a", false},
		{"a", "", false},
		{`abc\`, "abc", false}, // cut escapes (never from a Scanner) match nothing, and do not panic
		{`\u00`, "a", false},
		{`a\u004`, "aA", false},
	} {
		if got := KeyFolds(tt.raw, tt.name); got != tt.want {
			t.Errorf("KeyFolds(%q, %q) = %v, want %v", tt.raw, tt.name, got, tt.want)
		}
	}
}

// FuzzKeyFolds holds KeyFolds to encoding/json's matching of names to fields.
func FuzzKeyFolds(f *testing.F) {
	for _, s := range []string{"prompt_tokens", "PROMPT_TOKENS", `prompt\u005ftokens`, "\u212a\u017f", "\xff", `\udc00`, "É_ǅ", `\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		obj := `{"` + raw + `":1}`
		d := Scanner{Text: obj, AnyBytes: true}
		if d.Skip(0) != nil || d.End() != nil {
			return
		}
		var v foldFields
		if err := json.Unmarshal([]byte(obj), &v); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", obj, err)
		}
		for i, set := range [...]bool{v.A == 1, v.B == 1, v.C == 1} {
			if got := KeyFolds(raw, foldNames[i]); got != set {
				t.Fatalf("KeyFolds(%q, %q) = %v, encoding/json %v", raw, foldNames[i], got, set)
			}
		}
	})
}
