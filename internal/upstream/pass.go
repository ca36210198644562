package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// Pass is one pass-through call: the client's body goes to an engine of the same format with
// only the model name rewritten, and the engine's bytes come back unchanged but for the model
// name, with usage read on the way. The pipeline uses it when the client's format equals the
// engine's and no stage must change the request.
type Pass struct {
	// Body is the client's request body, not modified.
	Body []byte
	// Model is the engine's model name, written into the body; empty keeps the body's.
	Model string
	// ClientModel is the model name the client sees in the response; empty keeps the engine's.
	ClientModel string
}

// PassResult is what a pass-through call learned on the way.
type PassResult struct {
	// Usage is the engine's usage, read from the stream or body.
	Usage llm.Usage
	// Stream says the response was an SSE stream.
	Stream bool
	// Bytes counts the bytes written to the client.
	Bytes int64
}

// Forwarder is implemented by engines with a pass-through path.
type Forwarder interface {
	// Format is the wire format the engine speaks.
	Format() llm.Format
	// Forward sends p and writes the engine's answer to w, flushing w whenever the engine has
	// nothing more ready. A stream's prelude (events without content) is held back until the
	// first content, so an error before content leaves w untouched (the caller writes the error
	// in the client's format, or tries another engine); an error after that means the stream
	// was cut and the caller must end it with the format's error event.
	Forward(ctx context.Context, p *Pass, w io.Writer) (PassResult, error)
}

// MaxHeldEvents and MaxHeldBytes bound the prelude an Out holds back: a stream with more
// prelude than that before its first content has it released (and the attempt committed), as
// the pipeline does with the canonical events of the other engines.
const (
	MaxHeldEvents = 8
	MaxHeldBytes  = 64 << 10
)

// Out wraps the client's writer for a pass-through response: it sets the content type before the
// first byte (when the writer has headers), counts bytes, and flushes the writer. It also holds
// a stream's prelude (Hold) until the first event with content is written, so that nothing
// reaches the client, not even the status line, from an attempt that fails before content.
type Out struct {
	W           io.Writer
	ContentType string
	N           int64
	// Held is where the prelude is kept until the next Write. Give it a reusable buffer's [:0]
	// (Client.Buffer) and holding allocates nothing; nil allocates on the first Hold.
	Held    []byte
	nheld   int
	started bool
}

// Hold keeps a copy of the prelude event p, to be written before the next Write. It reports
// false, holding nothing, once anything was written or when the bounds are reached; the caller
// then writes p.
func (o *Out) Hold(p []byte) bool {
	if o.started || o.nheld >= MaxHeldEvents || len(o.Held)+len(p) > MaxHeldBytes {
		return false
	}
	o.Held = append(o.Held, p...)
	o.nheld++
	return true
}

// Release writes the held prelude, if any: for a stream that ends with nothing but prelude.
func (o *Out) Release() error {
	if len(o.Held) == 0 {
		return nil
	}
	_, err := o.Write(nil)
	return err
}

// Write implements io.Writer. The held prelude goes first.
func (o *Out) Write(p []byte) (int, error) {
	if len(o.Held) > 0 {
		h := o.Held
		o.Held, o.nheld = o.Held[:0], 0
		if _, err := o.write(h); err != nil {
			return 0, err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	return o.write(p)
}

func (o *Out) write(p []byte) (int, error) {
	if !o.started {
		o.started = true
		if h, ok := o.W.(interface{ Header() http.Header }); ok && o.ContentType != "" {
			hd := h.Header()
			hd.Set("Content-Type", o.ContentType)
			if bytes.HasPrefix([]byte(o.ContentType), []byte("text/event-stream")) {
				hd.Set("Cache-Control", "no-cache")
			}
		}
	}
	n, err := o.W.Write(p)
	o.N += int64(n)
	return n, err
}

// Started reports whether anything was written (a held prelude is not).
func (o *Out) Started() bool { return o.started }

// Flush flushes the writer when it can (http.Flusher, or a Flush() error method). Before
// anything was written it does nothing: flushing would send the status line.
func (o *Out) Flush() error {
	if !o.started {
		return nil
	}
	switch f := o.W.(type) {
	case interface{ Flush() error }:
		return f.Flush()
	case http.Flusher:
		f.Flush()
	}
	return nil
}

// ReplaceModel returns event with the first occurrence of old (a `"model":"name"` needle)
// replaced by repl, appended to dst; when old is absent it returns event itself.
func ReplaceModel(dst, event, old, repl []byte) []byte {
	i := bytes.Index(event, old)
	if i < 0 {
		return event
	}
	dst = append(dst, event[:i]...)
	dst = append(dst, repl...)
	return append(dst, event[i+len(old):]...)
}

// ModelNeedle returns `"model":"name"` as it appears in the engines' compact JSON.
func ModelNeedle(name string) []byte {
	return jsontext.AppendString([]byte(`"model":`), name)
}
