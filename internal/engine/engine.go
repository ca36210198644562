// Package engine defines what a backend is: something that turns a canonical request into a
// stream of canonical events pushed into a sink. Implementations live in the subpackages (sim,
// openai, anthropic, layer0); the pipeline picks one and never knows which.
package engine

import (
	"context"
	"errors"
	"fmt"

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

// MaxHeldEvents bounds the prelude held back before a stream's first content, on both paths (the
// pipeline's canonical events, an engine's pass-through bytes): a stream with more prelude than
// that has it released, and the attempt committed.
const MaxHeldEvents = 8
