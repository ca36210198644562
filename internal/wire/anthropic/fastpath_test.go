package anthropic

import "testing"

// FuzzPlainTextDelta checks dispatch's fast path against the scanner: whatever plainTextDelta
// accepts, the scanner decodes as a text delta with the same index and text.
func FuzzPlainTextDelta(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}`,
		`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"héllo ✓"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"b"}}`,
		`{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		index, text, ok := plainTextDelta(data)
		if !ok {
			return
		}
		var e sseEvent
		d := newScanner(string(data))
		err := e.read(&d)
		if err == nil {
			err = d.End()
		}
		if err != nil {
			t.Fatalf("fast path took %q, which the scanner refuses: %v", data, err)
		}
		if e.typ != "content_block_delta" || e.deltaType != "text_delta" || !e.hasIndex || e.index != index || e.text != string(text) {
			t.Fatalf("fast path read %q as index %d text %q; the scanner as %s/%s index %d (%v) text %q",
				data, index, text, e.typ, e.deltaType, e.index, e.hasIndex, e.text)
		}
	})
}

func TestPlainTextDelta(t *testing.T) {
	tests := []struct {
		in    string
		index int
		text  string
		ok    bool
	}{
		{`{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":" token"}}`, 3, " token", true},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\nb"}}`, 0, "", false},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\u0041"}}`, 0, "", false},
		{`{"type":"content_block_delta", "index":0,"delta":{"type":"text_delta","text":"a"}}`, 0, "", false},
		{`{"type":"content_block_delta","index":65536,"delta":{"type":"text_delta","text":"a"}}`, 0, "", false},
		{"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\"}}", 0, "", false},
	}
	for _, tt := range tests {
		index, text, ok := plainTextDelta([]byte(tt.in))
		if ok != tt.ok || ok && (index != tt.index || string(text) != tt.text) {
			t.Errorf("%s: got %d %q %v, want %d %q %v", tt.in, index, text, ok, tt.index, tt.text, tt.ok)
		}
	}
}
