package passthrough

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

func TestRenamer(t *testing.T) {
	tests := []struct {
		name, event, want string
	}{
		{"compact", `data: {"id":"c","model":"up/m","choices":[]}` + "\n\n",
			`data: {"id":"c","model":"llama","choices":[]}` + "\n\n"},
		{"spaced, another name", `data: {"id": "c", "model" : "llama-3.1-8b-2024-07-18", "choices": []}` + "\n\n",
			`data: {"id": "c", "model" : "llama", "choices": []}` + "\n\n"},
		{"no space after data:, CRLF", "data:{\"model\":\"x\"}\r\n\r\n", "data:{\"model\":\"llama\"}\r\n\r\n"},
		{"named event", "event: chunk\nid: 7\ndata: {\"model\":\"x\",\"n\":1}\n\n", "event: chunk\nid: 7\ndata: {\"model\":\"llama\",\"n\":1}\n\n"},
		{"data on several lines", "event: chunk\ndata: {\ndata:   \"id\": \"c\",\ndata:   \"model\": \"x\"\ndata: }\nid: 7\n\n",
			"event: chunk\ndata: {\ndata:   \"id\": \"c\",\ndata:   \"model\": \"llama\"\ndata: }\nid: 7\n\n"},
		{"the last of two", `data: {"model":"a","model":"b"}` + "\n\n", `data: {"model":"a","model":"llama"}` + "\n\n"},
		{"escaped key", `data: {"mod\u0065l":"a"}` + "\n\n", `data: {"mod\u0065l":"llama"}` + "\n\n"},
		{"null", `data: {"model":null}` + "\n\n", `data: {"model":"llama"}` + "\n\n"},
		{"already the client's", `data: {"model":"llama"}` + "\n\n", `data: {"model":"llama"}` + "\n\n"},
		{"nested only", `data: {"message":{"model":"x"}}` + "\n\n", `data: {"message":{"model":"x"}}` + "\n\n"},
		{"in a string only", `data: {"content":"\"model\":\"x\""}` + "\n\n", `data: {"content":"\"model\":\"x\""}` + "\n\n"},
		{"not an object", "data: [DONE]\n\n", "data: [DONE]\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, data := readEvent(t, tt.event)
			r := NewRenamer("llama")
			if got := string(r.Event(raw, data)); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	none := NewRenamer("")
	if ev := `data: {"model":"x"}` + "\n\n"; string(none.Event(readEvent(t, ev))) != ev {
		t.Error(`NewRenamer("") renamed`)
	}
}

// TestRenamerStream renames a stream event after event: the events that share the first one's
// prefix take the fast path, and those that do not, or that carry the key again, are scanned.
func TestRenamerStream(t *testing.T) {
	head := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct",`
	want := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"llama",`
	tests := []struct{ rest, want string }{
		{`"choices":[{"delta":{"role":"assistant"}}]}`, ""},
		{`"choices":[{"delta":{"content":"Hi"}}]}`, ""},
		{`"choices":[{"delta":{"content":"\"model\" \u00e9"}}]}`, ""},
		{`"choices":[],"model":"again"}`, `"choices":[],"model":"llama"}`},
		{`"choices":[],"mod\u0065l":"escaped"}`, `"choices":[],"mod\u0065l":"llama"}`},
		{`"choices":[{"delta":{"content":"model"}}]}`, ""},
	}
	r := NewRenamer("llama")
	for round := range 2 {
		for _, tt := range tests {
			raw, data := readEvent(t, head+tt.rest+"\n\n")
			w := want + tt.rest + "\n\n"
			if tt.want != "" {
				w = head + tt.want + "\n\n"
			}
			if got := string(r.Event(raw, data)); got != w {
				t.Errorf("round %d: got  %s\nwant %s", round, got, w)
			}
		}
		// Another prefix (another created) is scanned, and learned.
		head = strings.Replace(head, `"created":1`, `"created":2`, 1)
		want = strings.Replace(want, `"created":1`, `"created":2`, 1)
	}
	// The engine reports the client's name already: events come back as they are.
	r = NewRenamer("meta-llama/Llama-3.1-8B-Instruct")
	for range 2 {
		ev := head + `"choices":[]}` + "\n\n"
		if got := string(r.Event(readEvent(t, ev))); got != ev {
			t.Errorf("got %s, want it unchanged", got)
		}
	}
}

func TestRenamerEventAt(t *testing.T) {
	ev := "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1\", \"model\": \"claude-sonnet-4-5-20250929\", \"usage\": {}}}\n\n"
	raw, data := readEvent(t, ev)
	ms, me, _, _ := jsontext.Field(data, "message")
	s, e, _, _ := jsontext.Field(data[ms:me], "model")
	r := NewRenamer("sonnet")
	want := strings.Replace(ev, "claude-sonnet-4-5-20250929", "sonnet", 1)
	if got := string(r.EventAt(raw, data, ms+s, ms+e)); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestRenamerWriteJSON(t *testing.T) {
	body := []byte("{\n  \"id\": \"chatcmpl-1\",\n  \"model\": \"gpt-4o-2024-08-06\",\n  \"choices\": []\n}")
	s, e, _, _ := jsontext.Field(body, "model")
	for _, tt := range []struct {
		model string
		s, e  int
		want  string
	}{
		{"gpt-4o", s, e, strings.Replace(string(body), "gpt-4o-2024-08-06", "gpt-4o", 1)},
		{"", s, e, string(body)},
		{"gpt-4o", -1, -1, string(body)},
	} {
		var buf bytes.Buffer
		r := NewRenamer(tt.model)
		if err := r.WriteJSON(&buf, body, tt.s, tt.e); err != nil || buf.String() != tt.want {
			t.Errorf("%q: got %s %v, want %s", tt.model, buf.String(), err, tt.want)
		}
	}
}

// FuzzRenamer renames two events in a row (so that the second may take the learned fast path)
// and checks each against a scan: the top-level "model" value is the client's and every other
// byte of the data is the engine's.
func FuzzRenamer(f *testing.F) {
	f.Add(`{"id":"a","model":"m","x":1}`, `{"id":"a","model":"m","x":2}`)
	f.Fuzz(func(t *testing.T, d1, d2 string) {
		r := NewRenamer("client")
		for _, d := range []string{d1, d2} {
			if strings.ContainsAny(d, "\r") || strings.Contains(d, "\n\n") || strings.HasSuffix(d, "\n") {
				return
			}
			ev := "data: " + strings.ReplaceAll(d, "\n", "\ndata: ") + "\n\n"
			raw, data := readEvent(t, ev)
			if string(data) != d {
				return
			}
			got := r.Event(raw, data)
			_, gotData := readEvent(t, string(got))
			want := d
			if s, e, ok, err := jsontext.Field(data, "model"); ok && err == nil {
				want = d[:s] + `"client"` + d[e:]
			} else if err != nil && !json.Valid(data) {
				continue // not JSON: anything but a panic will do
			}
			if string(gotData) != want {
				t.Fatalf("data %q: got %q, want %q", d, gotData, want)
			}
		}
	})
}

// readEvent reads the one SSE event in ev as the engines do.
func readEvent(t testing.TB, ev string) (raw, data []byte) {
	t.Helper()
	raw, _, data, err := sse.NewReader(strings.NewReader(ev)).Next()
	if err != nil {
		t.Fatalf("event %q: %v", ev, err)
	}
	return raw, data
}

func BenchmarkRenamerStream(b *testing.B) {
	head := `data: {"id":"chatcmpl-8d2f0c5b1e7a4c3f","object":"chat.completion.chunk","created":1735689600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[`
	ev := []byte(head + `{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	data := ev[len("data: ") : len(ev)-2]
	r := NewRenamer("llama")
	r.Event(ev, data)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		r.Event(ev, data)
	}
}
