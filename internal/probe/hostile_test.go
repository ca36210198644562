package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStreamHostileEventBounded: a server that sends one SSE event made of data lines without
// end (no blank line) gets an error once the event passes maxEvent, instead of the probe
// holding all of it.
func TestStreamHostileEventBounded(t *testing.T) {
	line := append(append([]byte("data: "), bytes.Repeat([]byte("x"), 256<<10)...), '\n')
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 2 * maxEvent / len(line) { // twice the bound, then the event ends
			if _, err := w.Write(line); err != nil {
				return
			}
		}
		w.Write([]byte("\n")) //nolint:errcheck // the client may have gone
	}))
	defer srv.Close()
	var got int
	x, err := Stream(context.Background(), srv.Client(), Call{API: Anthropic, Base: srv.URL, Model: "m", Prompt: "hi",
		OnText: func(s string) { got += len(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x.Error, "larger than") {
		t.Fatalf("error %q, want the event refused as too large", x.Error)
	}
	if x.Bytes > int64(maxEvent)+int64(len(line))+64<<10 {
		t.Fatalf("read %d bytes of a stream whose event passed %d bytes", x.Bytes, maxEvent)
	}
}

// TestStreamInvalidTraceComment: a stream whose layer0-trace comment is not JSON leaves the
// exchange without a trace, so the report still renders as JSON (--json).
func TestStreamInvalidTraceComment(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" + //nolint:errcheck
			": layer0-trace {not json\n\n"))
	}))
	defer srv.Close()
	x, err := Stream(context.Background(), srv.Client(), Call{API: Anthropic, Base: srv.URL, Model: "m", Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if x.Text != "hi" || x.Trace != nil {
		t.Fatalf("text %q, trace %q; want hi and no trace", x.Text, x.Trace)
	}
	if _, err := json.Marshal(x); err != nil {
		t.Fatalf("the exchange does not render as JSON: %v", err)
	}
}
