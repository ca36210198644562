package passthrough

import (
	"context"

	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
)

// Wrap returns an engine that generates as outer does and passes a client's bytes through
// inner's pass-through path: for an engine that decorates another (usually one it wraps) and
// whose canonical answers the bytes inner forwards stand for. It keeps outer's token counting
// (engine.Counter) and embeddings (engine.Embedder) when outer has them; its Close is outer's.
// When inner has no pass-through path, Wrap returns outer itself.
func Wrap(outer, inner engine.Engine) engine.Engine {
	f, ok := inner.(Forwarder)
	if !ok {
		return outer
	}
	w := wrapped{Engine: outer, f: f}
	c, counts := outer.(engine.Counter)
	em, embeds := outer.(engine.Embedder)
	switch {
	case counts && embeds:
		return struct {
			wrapped
			engine.Counter
			engine.Embedder
		}{w, c, em}
	case counts:
		return struct {
			wrapped
			engine.Counter
		}{w, c}
	case embeds:
		return struct {
			wrapped
			engine.Embedder
		}{w, em}
	}
	return w
}

// wrapped is outer's Generate and Close with f's pass-through path.
type wrapped struct {
	engine.Engine
	f Forwarder
}

// Format implements Forwarder.
func (w wrapped) Format() llm.Format { return w.f.Format() }

// Forward implements Forwarder.
func (w wrapped) Forward(ctx context.Context, p *Pass, out Writer) (Result, error) {
	return w.f.Forward(ctx, p, out)
}

// Speaks implements Speaker: the formats the inner engine takes.
func (w wrapped) Speaks(fm llm.Format) bool { return Speaks(w.f, fm) }
