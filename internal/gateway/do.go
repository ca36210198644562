package gateway

import (
	"context"
	"fmt"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
)

// Do runs req through the live pipeline in-process and pushes the response events into sink,
// after the checks every HTTP front applies; see the root package's Gateway.Do.
func (g *Gateway) Do(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	if err := req.Validate(); err != nil {
		return err
	}
	col, isCol := sink.(*llm.Collector)
	if sink == nil || isCol && col == nil {
		return apierr.New(apierr.InvalidRequest, "sink is missing (nil)")
	}
	c := pipeline.Call{Request: req, Sink: &idSink{Sink: sink}, Key: pipeline.Anonymous()}
	if isCol {
		// Passed as itself, the pipeline recognises a collector: nothing of it reaches anyone
		// before Do returns, so any failure can still move to another replica or model.
		c.Sink = col
	}
	gen := g.acquire()
	err := gen.pipe.Serve(ctx, &c)
	gen.release()
	if col != nil && err == nil && col.Response.ID == "" {
		col.Response.ID = ids.Message()
	}
	return err
}

// idSink gives in-process responses a message id, as the HTTP encoders do.
type idSink struct {
	llm.Sink
}

func (s *idSink) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventStart && ev.ID == "" {
		ev.ID = ids.Message()
	}
	return s.Sink.Send(ev)
}

// unready says why the generation cannot serve now: one reason for each model marked required
// (models.ID.required, the default) none of whose replicas can take a request, naming each
// replica and why (down, ejected, breaker). Empty when ready.
func (g *generation) unready() []string {
	var reasons []string
	for _, id := range sortedNames(g.cfg.Models) {
		mc := g.cfg.Models[id]
		if mc.Required != nil && !*mc.Required {
			continue
		}
		why := make([]string, 0, len(mc.Engines))
		for _, en := range mc.Engines {
			r := g.replicas[en]
			reason := r.route.Unavailable()
			if reason == "" {
				why = nil
				break
			}
			why = append(why, en+": "+reason)
		}
		if why != nil {
			reasons = append(reasons, fmt.Sprintf("model %q: no healthy replica (%s)", id, strings.Join(why, ", ")))
		}
	}
	return reasons
}
