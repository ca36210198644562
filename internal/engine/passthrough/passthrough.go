// Package passthrough owns forwarding a client's own bytes to an engine that speaks the client's
// wire format, and the engine's bytes back: the capability an engine offers for it (Forwarder,
// Pass, Result, Writer), the one copy loop every format's pass-through runs (Forward), the
// model renaming of the answer (Renamer) and the client's side of the copy (Out, which holds a
// stream's prelude back and coalesces writes).
//
// A format is a Policy over Forward's loop: which events are prelude, how an error event and
// usage look, what ends the stream, what each event is checked for. Forward reads each event
// once, as it is copied, and allocates nothing per event; the built-in engines (openai,
// anthropic) are policies over it, and so may be an engine that is not built in.
package passthrough

import (
	"context"
	"io"
	"net/http"

	"github.com/layer0ai/layer0/internal/llm"
)

// Writer is the client's response writer as a pass-through path writes to it: bytes, and a
// Flush that pushes what was written to the client now.
type Writer interface {
	io.Writer
	Flush() error
}

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
	// Format is the client's format, which the engine speaks (Forwarder, Speaker).
	Format llm.Format
	// Header holds the client's request headers and Query its raw URL query, of which a
	// Forwarder passes on those its format defines (the Messages API's anthropic-beta and
	// ?beta=true); nil and "" pass nothing.
	Header http.Header
	Query  string
	// Checked says Body is, unchanged, the request the pipeline decoded and checked: a JSON
	// object whose model is ClientModel and whose stream member says Stream. A Forwarder may
	// then take them from here rather than read Body again (a coding agent's request is often
	// 100 KB or more); without Checked it reads them from Body. Whoever changes Body before
	// handing the Pass on (an engine wrapping a Forwarder) clears Checked.
	Checked bool
	// Stream says the request asks for a stream; it is meaningful with Checked.
	Stream bool
}

// Result is what a pass-through call learned on the way.
type Result struct {
	// Usage is the engine's usage, read from the stream or body.
	Usage llm.Usage
	// Stream says the response was an SSE stream.
	Stream bool
	// Bytes counts the bytes written to the client.
	Bytes int64
	// Deltas counts the content deltas written (the events the policy marked Event.Delta): the
	// output a stream cut before the engine's final usage is billed for, a token each.
	Deltas int
}

// Forwarder is implemented by engines with a pass-through path: engines that speak a client
// format.
type Forwarder interface {
	// Format is the wire format the engine speaks.
	Format() llm.Format
	// Forward sends p and writes the engine's answer to w, flushing w whenever the engine has
	// nothing more ready, except after a stream's last event: the caller ends the response,
	// which sends what is left (an HTTP handler that returns sends it with the chunked body's
	// end, in one write instead of two). A stream's prelude (events without content) is held
	// back until the first content, so an error before content leaves w untouched (the caller
	// writes the error in the client's format, or tries another engine); an error after that
	// means the stream was cut and the caller must end it with the format's error event.
	Forward(ctx context.Context, p *Pass, w Writer) (Result, error)
}

// Speaker is implemented by forwarders that speak client formats beyond their Format (an
// OpenAI-format engine that serves the Responses API too): the pass-through path is offered for
// every format Speaks reports.
type Speaker interface {
	Speaks(f llm.Format) bool
}

// Speaks reports whether the forwarder f takes a client's bytes in format fm.
func Speaks(f Forwarder, fm llm.Format) bool {
	if s, ok := f.(Speaker); ok {
		return s.Speaks(fm)
	}
	return f.Format() == fm
}
