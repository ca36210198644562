package passthrough

import (
	"bytes"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// TestOutHold checks the held prelude: nothing reaches the writer (not even a flush) until the
// first Write, which sends the prelude first; bounds release it.
func TestOutHold(t *testing.T) {
	rec := httptest.NewRecorder()
	o := &Out{W: fake.Writer(rec), ContentType: "text/event-stream"}
	if !o.Hold([]byte("A\n\n")) || !o.Hold([]byte("B\n\n")) {
		t.Fatal("the prelude was not held")
	}
	if err := o.Flush(); err != nil {
		t.Fatal(err)
	}
	if o.Started() || rec.Body.Len() != 0 || rec.Flushed || rec.Header().Get("Content-Type") != "" {
		t.Fatalf("a held prelude reached the writer: started %v body %q flushed %v header %v",
			o.Started(), rec.Body.String(), rec.Flushed, rec.Header())
	}
	if n, err := o.Write([]byte("C\n\n")); n != 3 || err != nil {
		t.Fatalf("Write: got %d %v, want 3 nil", n, err)
	}
	if got := rec.Body.String(); got != "A\n\nB\n\nC\n\n" || o.N != int64(len(got)) {
		t.Errorf("got %q (N %d), want the prelude then the content", got, o.N)
	}
	if o.Hold([]byte("D\n\n")) {
		t.Error("held an event after the stream started")
	}

	// Release sends a prelude that nothing followed.
	var buf bytes.Buffer
	o = &Out{W: fake.Writer(&buf)}
	o.Hold([]byte("only\n\n"))
	if err := o.Release(); err != nil || buf.String() != "only\n\n" || !o.Started() {
		t.Errorf("Release: got %q %v", buf.String(), err)
	}

	// Bounds: events, then bytes.
	o = &Out{W: fake.Writer(io.Discard)}
	for i := range engine.MaxHeldEvents {
		if !o.Hold([]byte("e" + strconv.Itoa(i))) {
			t.Fatalf("event %d not held", i)
		}
	}
	if o.Hold([]byte("one more")) {
		t.Errorf("held more than %d events", engine.MaxHeldEvents)
	}
	o = &Out{W: fake.Writer(io.Discard)}
	if !o.Hold(make([]byte, MaxHeldBytes)) || o.Hold([]byte("x")) {
		t.Errorf("the byte bound %d was not applied", MaxHeldBytes)
	}
}

func TestOutHoldAllocs(t *testing.T) {
	prelude := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	content := []byte(strings.Replace(string(prelude), `"role":"assistant","content":""`, `"content":"hi"`, 1))
	held := make([]byte, 0, 1024)
	w := fake.Writer(io.Discard)
	o := &Out{W: w}
	allocs := testing.AllocsPerRun(100, func() {
		*o = Out{W: w, Held: held[:0]}
		o.Hold(prelude)
		o.Write(content)
	})
	if allocs != 0 {
		t.Errorf("holding a prelude: got %v allocations, want 0", allocs)
	}
}
