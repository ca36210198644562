package pipeline

import (
	"context"

	"github.com/layer0ai/layer0/internal/admission"
	"github.com/layer0ai/layer0/internal/limit"
)

// Admission is the admission gate (nil when the pipeline has none), for the next pipeline's
// gate to take over its queues on reload.
func (p *Pipeline) Admission() *admission.Gate { return p.admit }

// admitPool waits for the request's place in model's pool when the pool is saturated (its
// band, tenant and what the queue did go to the Record), or returns the error of a request shed
// or a client that left. The Slot must be released when the request ends.
func (p *Pipeline) admitPool(ctx context.Context, c *Call, model, key string) (admission.Slot, error) {
	if !p.admit.Gated(model) {
		return admission.Slot{}, nil
	}
	// The queued request holds its decoded form, and its body when it may pass through.
	size := int64(limit.RequestBytes(c.Request))
	if c.Forward != nil {
		size += int64(len(c.Forward.Body))
	}
	return p.admit.Acquire(ctx, model, key, c.Header, size, &c.Record.Admission)
}
