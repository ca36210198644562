package passthrough

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/layer0ai/layer0/internal/llm"
)

// testPolicy is a policy as an engine that is not built in would write one: "start" events are
// prelude, "stop" ends the stream, "fail" is the engine's error, the top-level model renamed.
type testPolicy struct{ stopped bool }

var errFail = errors.New("the engine failed")

func (*testPolicy) Event(e *Event, u *llm.Usage) error {
	switch string(e.Name) {
	case "start":
		e.Kind = Prelude
	case "stop":
		e.Kind = Last
	case "fail":
		return errFail
	case "usage":
		u.OutputTokens++
		e.Kind = Drop
	}
	e.ModelTop = true
	return nil
}

func (*testPolicy) End([]byte) error { return errors.New("the stream ended early") }

func (*testPolicy) Answer(body []byte, u *llm.Usage) (Answer, error) { return Answer{}, nil }

// writes records each write and flush.
type writes struct {
	w       []string
	flushes int
}

func (w *writes) Write(b []byte) (int, error) { w.w = append(w.w, string(b)); return len(b), nil }
func (w *writes) Flush() error                { w.flushes++; return nil }

func ev(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

func TestForwardPolicy(t *testing.T) {
	stream := ev("start", `{"model":"engine"}`) + ": keep-alive\n\n" + ev("delta", `{"model":"engine","text":"a"}`) +
		ev("usage", `{}`) + ev("delta", `{"model":"engine","text":"b"}`) + ev("stop", `{}`)
	var w writes
	res, err := Forward(&testPolicy{}, &Source{Body: strings.NewReader(stream), ContentType: "text/event-stream",
		Stream: true, ClientModel: "client"}, &w)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(strings.Replace(stream, ev("usage", `{}`), "", 1), `"engine"`, `"client"`)
	if got := strings.Join(w.w, ""); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	// One burst: the held prelude, then the events queued with it, in two writes; no flush
	// after the last event (the caller ends the response).
	if len(w.w) != 2 || w.flushes != 0 {
		t.Errorf("got %d writes and %d flushes, want 2 and 0: %q", len(w.w), w.flushes, w.w)
	}
	if !res.Stream || res.Bytes != int64(len(want)) || res.Usage.OutputTokens != 1 {
		t.Errorf("got result %+v", res)
	}
}

// TestForwardFailure: an error before content leaves the writer untouched; after content, what
// was queued reaches the writer before the error is returned.
func TestForwardFailure(t *testing.T) {
	for _, tt := range []struct {
		name, stream, want string
	}{
		{"before content", ev("start", `{}`) + ev("fail", `{}`), ""},
		{"after content", ev("start", `{}`) + ev("delta", `{}`) + ev("fail", `{}`), ev("start", `{}`) + ev("delta", `{}`)},
		{"cut", ev("delta", `{}`), ev("delta", `{}`)},
	} {
		var w writes
		wrap := func(err error) error { return errors.Join(errors.New("wrapped"), err) }
		_, err := Forward(&testPolicy{}, &Source{Body: strings.NewReader(tt.stream), ContentType: "text/event-stream",
			Stream: true, Err: wrap}, &w)
		if err == nil || !strings.Contains(err.Error(), "wrapped") {
			t.Errorf("%s: got error %v, want one given its context", tt.name, err)
		}
		if got := strings.Join(w.w, ""); got != tt.want {
			t.Errorf("%s: the client got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestForwardAllocs: the loop allocates nothing per event.
func TestForwardAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race")
	}
	stream := func(n int) []byte {
		var b bytes.Buffer
		b.WriteString(ev("start", `{"model":"engine"}`))
		for range n {
			b.WriteString(ev("delta", `{"model":"engine","text":"a"}`))
		}
		b.WriteString(ev("stop", `{}`))
		return b.Bytes()
	}
	allocs := func(s []byte) float64 {
		r := bytes.NewReader(s)
		pl := &testPolicy{}
		src := &Source{Body: r, ContentType: "text/event-stream", Stream: true, ClientModel: "client"}
		return testing.AllocsPerRun(20, func() {
			r.Reset(s)
			if _, err := Forward(pl, src, &devNull{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if few, many := allocs(stream(10)), allocs(stream(1000)); many > few {
		t.Errorf("10 events: %v allocations, 1000 events: %v; want no allocation per event", few, many)
	}
}

type devNull struct{}

func (devNull) Write(b []byte) (int, error) { return len(b), nil }
func (devNull) Flush() error                { return nil }

// shortcutPolicy is testPolicy with a Shortcut: it takes a delta event written as deltaEvent
// writes it (its text plain), with its model at a known place, as Event would take it.
type shortcutPolicy struct{ testPolicy }

func deltaEvent(text string) string { return ev("delta", `{"model":"engine","text":"`+text+`"}`) }

var deltaHead = []byte("event: delta\ndata: {\"model\":\"engine\",\"text\":\"")

func (*shortcutPolicy) Match(buf []byte) Matched {
	rest, ok := bytes.CutPrefix(buf, deltaHead)
	if !ok {
		return Matched{}
	}
	i := bytes.Index(rest, []byte("\"}\n\n"))
	if i < 0 || bytes.ContainsAny(rest[:i], "\"\\\n") {
		return Matched{}
	}
	ms := len("event: delta\ndata: {\"model\":")
	return Matched{N: len(deltaHead) + i + 4, ModelStart: ms, ModelEnd: ms + len(`"engine"`)}
}

// TestForwardShortcut: the events a Shortcut takes reach the client as Event would have them
// reach it, their model renamed, in runs or one by one, however the stream is read.
func TestForwardShortcut(t *testing.T) {
	stream := ev("start", `{"model":"engine"}`) + deltaEvent("a") + deltaEvent("b") + ": keep-alive\n\n" +
		deltaEvent("c") + ev("usage", `{}`) + deltaEvent("d") + deltaEvent("e") + deltaEvent("f") + ev("stop", `{}`)
	for _, model := range []string{"", "engine", "client", "a much longer client model name"} {
		for _, read := range []func(string) io.Reader{
			func(s string) io.Reader { return strings.NewReader(s) },
			func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
			func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		} {
			var fast, slow bytes.Buffer
			run := func(p Policy, out *bytes.Buffer) Result {
				res, err := Forward(p, &Source{Body: read(stream), ContentType: "text/event-stream", Stream: true,
					ClientModel: model}, &writes2{out})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			rf, rs := run(&shortcutPolicy{}, &fast), run(&testPolicy{}, &slow)
			if fast.String() != slow.String() || rf != rs {
				t.Fatalf("client model %q: with the shortcut %q, %+v\nwithout %q, %+v", model, fast.String(), rf, slow.String(), rs)
			}
		}
	}
}

// writes2 is a Writer into a buffer.
type writes2 struct{ b *bytes.Buffer }

func (w *writes2) Write(b []byte) (int, error) { return w.b.Write(b) }
func (w *writes2) Flush() error                { return nil }

// usagePolicy reads usage from any body and claims, or not, to have checked it: Forward must
// refuse a broken answer either way when the policy did not check it, and keep none of what
// the policy read of it.
type usagePolicy struct {
	testPolicy
	checked bool
}

func (p *usagePolicy) Answer(body []byte, u *llm.Usage) (Answer, error) {
	u.OutputTokens = 7
	return Answer{Checked: p.checked}, nil
}

// TestForwardAnswerChecked: an answer a policy did not check in its own pass is checked by
// Forward; a broken one is refused with no usage; one the policy checked is not read again.
func TestForwardAnswerChecked(t *testing.T) {
	for _, tt := range []struct {
		name    string
		body    string
		checked bool
		ok      bool
	}{
		{"whole, unchecked", `{"a":1}`, false, true},
		{"cut, unchecked", `{"a":`, false, false},
		{"not UTF-8, unchecked", "{\"a\":\"\xff\"}", false, false},
		{"trailing bytes, unchecked", `{"a":1} x`, false, false},
		{"whole, checked", `{"a":1}`, true, true},
	} {
		var w writes
		res, err := Forward(&usagePolicy{checked: tt.checked}, &Source{Body: strings.NewReader(tt.body),
			ContentType: "application/json"}, &w)
		if (err == nil) != tt.ok {
			t.Errorf("%s: error %v, want ok=%v", tt.name, err, tt.ok)
		}
		if !tt.ok && (res.Usage.OutputTokens != 0 || len(w.w) != 0) {
			t.Errorf("%s: a refused answer left usage %+v and wrote %q", tt.name, res.Usage, w.w)
		}
		if tt.ok && (res.Usage.OutputTokens != 7 || strings.Join(w.w, "") != tt.body) {
			t.Errorf("%s: usage %+v, wrote %q", tt.name, res.Usage, w.w)
		}
	}
}
