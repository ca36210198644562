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
