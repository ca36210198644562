package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// FuzzDecodeRequest checks that any body either decodes or fails with a 400 naming a reason,
// that a body that is not UTF-8 never decodes, and that a decoded request passes
// llm.Request.Validate and encodes to valid JSON that decodes again.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"a","messages":[{"role":"user","content":"hi","role":"user"}],"model":"b"}`))
	f.Add([]byte("{\"model\":\"m\",\"stop\":[\"a\",\"\xff\"],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\"}]}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRequest(body)
		inPlace(t, body, r, err)
		if err == nil && !utf8.Valid(body) {
			t.Fatalf("decoded a body that is not UTF-8: %q", body)
		}
		if err == nil {
			if verr := r.Validate(); verr != nil {
				t.Fatalf("decoded request fails Validate: %v", verr)
			}
		}
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Message == "" {
				t.Fatalf("got %v, want a 400 *apierr.Error with a message", err)
			}
			return
		}
		out := AppendRequest(nil, r)
		if !json.Valid(out) {
			t.Fatalf("AppendRequest wrote invalid JSON %q", out)
		}
		r2, err := DecodeRequest(out)
		if err != nil {
			t.Fatalf("re-decode of %q: %v", out, err)
		}
		if r2.Ignored != "" {
			t.Fatalf("re-decode of %q ignored %q, a field layer0 itself writes", out, r2.Ignored)
		}
		if out2 := AppendRequest(nil, r2); !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
	})
}

// inPlace decodes body in a buffer of its own, as the server decodes in place, and checks that
// it reads as r and err (the decoding of a copy) did; then it overwrites the buffer, as the next
// request read into it does, and checks that what outlives a request kept its own copy: the
// model, the user, the ignored field's name, and the error's message (the access log's).
func inPlace(t *testing.T, body []byte, r *llm.Request, err error) {
	t.Helper()
	buf := bytes.Clone(body)
	ri, _, erri := DecodeRequestText(unsafe.String(unsafe.SliceData(buf), len(buf)))
	if (err == nil) != (erri == nil) || err != nil && erri.Error() != err.Error() {
		t.Fatalf("in place: %v, in a copy: %v", erri, err)
	}
	if err == nil && !bytes.Equal(AppendRequest(nil, ri), AppendRequest(nil, r)) {
		t.Fatalf("in place the request encodes as\n%s\nin a copy as\n%s", AppendRequest(nil, ri), AppendRequest(nil, r))
	}
	for i := range buf {
		buf[i] = '#'
	}
	if err != nil {
		if erri.Error() != err.Error() {
			t.Fatalf("once the buffer is reused the error says %q, not %q", erri, err)
		}
		return
	}
	if ri.Model != r.Model || ri.UserID != r.UserID || ri.Ignored != r.Ignored {
		t.Fatalf("once the buffer is reused: model %q, user %q, ignored %q; want %q, %q, %q",
			ri.Model, ri.UserID, ri.Ignored, r.Model, r.UserID, r.Ignored)
	}
}

// FuzzReadStream checks that any engine stream either ends in a stop event with no error, or
// in an error with no stop event, and never sends events out of order.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		s := newOrderSink()
		err := ReadStream(bytes.NewReader(body), s)
		if s.err != nil {
			t.Fatalf("event order: %v", s.err)
		}
		if (err == nil) != s.stopped() {
			t.Fatalf("got error %v with stopped=%v", err, s.stopped())
		}
	})
}

// FuzzDuplicateKey holds the decoder's check of repeated names to the scanner's: on valid JSON,
// names compared exactly, both find the same repeated name, or neither does; compared ignoring
// case where structs are read, the decoder finds one whenever the scanner does.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":1,"b":2}]}`, `{"a":1,"\u0061":2}`, `[{"x":{}},{"x":{}}]`, `{"a":1,"A":2}`, `{"a":"}\"","b":[]}`,
		`{"messages":[{"content":[{"image_url":{"url":1,"URL":2}}]}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || !utf8.Valid(data) {
			return
		}
		s := jsontext.Scanner{Text: string(data), MaxDepth: 1 << 20}
		var de *jsontext.DuplicateKeyError
		want := errors.As(s.SkipUnique(0), &de)
		d := NewDecoder(data)
		if got := duplicateKey(d, ShapeRaw); got != want {
			t.Fatalf("%q: the decoder found %v, jsontext %v", data, got, want)
		} else if got && pathString(d.dup) != pathString(de.Path) {
			t.Fatalf("%q: the decoder found %s, jsontext %s", data, pathString(d.dup), pathString(de.Path))
		}
		if want && !duplicateKey(d, shapeRequest) {
			t.Fatalf("%q: names compared ignoring case found no repeated name", data)
		}
	})
}
