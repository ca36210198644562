// Package engine defines what a backend is: something that turns a canonical request into a
// stream of canonical events pushed into a sink. Implementations live in the subpackages (sim,
// openai, anthropic, layer0); the pipeline picks one and never knows which.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/layer0ai/layer0/internal/llm"
)

// Engine generates a response for a request.
//
// Generate pushes the events of one response into sink, in the order llm.EventKind documents,
// and calls sink.Flush whenever it is about to wait for the next token. It returns when the
// response is complete (after EventStop), when sink returns an error, or when ctx is done — and a
// canceled ctx must stop the work on the engine promptly. An error returned before any event was
// sent leaves the request free to go to another engine; errors are *apierr.Error where the engine
// can classify them.
//
// Close releases what the engine holds — idle connections, anything it runs in the background
// — once the gateway no longer routes to it (a reload that replaced it, or the gateway's
// Close). It is called once, after every request sent to the engine has returned; a request
// sent after it may fail.
type Engine interface {
	Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error
	Close() error
}

// Embedder is implemented by engines that embed text (POST /v1/embeddings): one vector per input,
// in order. An error is an *apierr.Error where the engine can classify it.
type Embedder interface {
	Embed(ctx context.Context, req *llm.EmbedRequest) (*llm.Embeddings, error)
}

// Counter is implemented by engines that count input tokens in their own tokenizer.
type Counter interface {
	CountTokens(req *llm.Request) (int, error)
}

// Writer is the client's response writer as an engine's pass-through path writes to it: bytes,
// and a Flush that pushes what was written to the client now.
type Writer interface {
	io.Writer
	Flush() error
}

// ErrClientWrite is the cause of every failure to write an answer to the client: a write
// deadline that passed because the client stopped reading (an HTTP/1.1 socket it never reads,
// an HTTP/2 stream it never grants window), a connection it reset. It is the client's failure,
// never the engine's: an attempt that ends with it counts neither for nor against the replica
// (route.Classify reports it as a cancellation).
var ErrClientWrite = errors.New("writing to the client failed")

// ClientWrite returns err, a failure to write to the client, marked with ErrClientWrite; nil
// and errors already marked are returned as they are.
func ClientWrite(err error) error {
	if err == nil || errors.Is(err, ErrClientWrite) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrClientWrite, err)
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
	Forward(ctx context.Context, p *Pass, w Writer) (PassResult, error)
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

// MaxHeldEvents bounds the prelude held back before a stream's first content, on both paths (the
// pipeline's canonical events, an engine's pass-through bytes): a stream with more prelude than
// that has it released, and the attempt committed.
const MaxHeldEvents = 8
