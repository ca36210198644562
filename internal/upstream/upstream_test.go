package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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

func TestRewriteModel(t *testing.T) {
	tests := []struct{ body, model, want string }{
		{`{"model":"a","stream":true}`, "b/c", `{"model":"b/c","stream":true}`},
		{`{"stream":true, "model" : "a" }`, `q"x`, `{"stream":true, "model" : "q\"x" }`},
		{`{"stream":true}`, "m", `{"model":"m","stream":true}`},
		{`{ }`, "m", `{"model":"m" }`},
	}
	for _, tt := range tests {
		got, err := RewriteModel(nil, []byte(tt.body), tt.model)
		if err != nil || string(got) != tt.want {
			t.Errorf("got %s %v, want %s", got, err, tt.want)
		}
	}
}

// FuzzRewriteModel checks RewriteModel against decode, set, re-encode: for any body that
// encoding/json takes as an object, the result decodes to the same object with the new model.
func FuzzRewriteModel(f *testing.F) {
	f.Add([]byte(`{"model":"a","messages":[{"role":"user","content":"x"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var want map[string]any
		if json.Unmarshal(body, &want) != nil || want == nil {
			return
		}
		got, err := RewriteModel(nil, body, "new-model")
		if err != nil {
			t.Fatalf("RewriteModel refused %q, which encoding/json takes: %v", body, err)
		}
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatalf("RewriteModel wrote invalid JSON %q: %v", got, err)
		}
		want["model"] = "new-model"
		if diff := cmp.Diff(want, m); diff != "" {
			t.Fatalf("mismatch for %q (-want +got):\n%s", body, diff)
		}
	})
}

func TestEventReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	in := "\n: comment\n\nevent: message_start\ndata: {\"a\":1}\n\ndata: one\r\ndata: two\r\n\r\ndata: " + long + "\n\nevent: tail"
	r := NewEventReader(strings.NewReader(in))
	type ev struct{ Raw, Name, Data string }
	var got []ev
	for {
		raw, name, data, err := r.Next()
		if err == io.EOF {
			got = append(got, ev{string(raw), "EOF", ""})
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev{string(raw), string(name), string(data)})
	}
	want := []ev{
		{": comment\n\n", "", ""},
		{"event: message_start\ndata: {\"a\":1}\n\n", "message_start", `{"a":1}`},
		{"data: one\r\ndata: two\r\n\r\n", "", "one\ntwo"},
		{"data: " + long + "\n\n", "", long},
		{"event: tail", "EOF", ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"7"}}, 1500 * time.Millisecond},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{}, 0},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.h); got != tt.want {
			t.Errorf("got %v for %v, want %v", got, tt.h, tt.want)
		}
	}
	date := http.Header{"Retry-After": {time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}
	if got := RetryAfter(date); got < 59*time.Minute || got > time.Hour {
		t.Errorf("got %v for a date an hour ahead", got)
	}
}

func TestSecret(t *testing.T) {
	s := Secret{"sk-abcdef123456"}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s), fmt.Sprintf("%+v", struct{ K Secret }{s})} {
		if strings.Contains(out, "sk-abc") {
			t.Errorf("got %q", out)
		}
	}
	if got := s.Redact("bad key sk-abcdef123456!"); got != "bad key [redacted]!" {
		t.Errorf("got %q", got)
	}
}

func BenchmarkRewriteModel(b *testing.B) {
	body := []byte(`{"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a long story about a lighthouse keeper."}],"model":"llama","stream":true,"max_tokens":256}`)
	dst := make([]byte, 0, 512)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = RewriteModel(dst[:0], body, "meta-llama/Llama-3.1-8B-Instruct")
	}
}
