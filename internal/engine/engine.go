// Package engine defines what a backend is: something that turns a canonical request into a
// stream of canonical events pushed into a sink. Implementations live in the subpackages (sim,
// openai, anthropic, layer0); the pipeline picks one and never knows which.
package engine

import (
	"context"

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

// Counter is implemented by engines that count input tokens in their own tokenizer.
type Counter interface {
	CountTokens(req *llm.Request) (int, error)
}
