package server

import (
	"net/http"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
)

// countTokens serves POST /v1/messages/count_tokens.
func (x *exchange) countTokens() {
	body, ok := x.readBody()
	if !ok {
		return
	}
	req, err := anthropic.DecodeCountTokens(body)
	if err != nil {
		x.fail(err)
		return
	}
	if err := x.p.Sizes().Check(req); err != nil { // counted like a request: bounded like one
		x.fail(err)
		return
	}
	rec := &x.call.Record
	rec.Format = llm.FormatAnthropic
	if _, err := x.model(req.Model); err != nil { // unknown, or not this key's to use
		x.fail(err)
		return
	}
	lease, ok := x.admitQuery(req)
	if !ok {
		return
	}
	defer lease.Release() //nolint:errcheck // a store that cannot release leaves the limit stricter
	n, err := x.p.CountTokens(req)
	if err != nil {
		x.fail(err)
		return
	}
	rec.Usage.InputTokens = n
	x.writeFull(http.StatusOK, "application/json", anthropic.AppendCountTokens(nil, n))
}

func (x *exchange) anthropicModels() []anthropic.Model {
	ms := x.models()
	out := make([]anthropic.Model, len(ms))
	for i, m := range ms {
		out[i] = anthropic.Model{ID: m.ID, DisplayName: m.DisplayName, Created: m.Created}
	}
	return out
}

// listModels serves GET /v1/models.
func (x *exchange) listModels() {
	body, err := anthropic.AppendModelList(nil, x.anthropicModels(), x.r.URL.Query())
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusOK, "application/json", body)
}

// getModel serves GET /v1/models/{id}.
func (x *exchange) getModel(id string) {
	m, err := x.model(id)
	if err != nil {
		x.fail(err)
		return
	}
	body := anthropic.AppendModel(nil, anthropic.Model{ID: m.ID, DisplayName: m.DisplayName, Created: m.Created})
	x.writeFull(http.StatusOK, "application/json", body)
}

// models returns the models the caller's key may use, in id order.
func (x *exchange) models() []*pipeline.Model {
	all := x.p.Models()
	k := x.call.Key
	if k == nil {
		return all
	}
	out := make([]*pipeline.Model, 0, len(all))
	for _, m := range all {
		if k.Allow(m.ID) == nil {
			out = append(out, m)
		}
	}
	return out
}

// model finds a model by name (or alias) that the caller's key may use.
func (x *exchange) model(id string) (*pipeline.Model, error) {
	m, err := x.p.Model(id)
	if err != nil {
		return nil, err
	}
	if k := x.call.Key; k != nil {
		if err := k.Allow(m.ID); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// admitQuery takes what an answer that runs no engine (a token count, a cache query) costs the
// key's limits: a request and a concurrency slot, no tokens, before the tokenizer runs, as a
// message takes them; then it refuses a query whose prompt cannot fit the key's input-token
// limits (Pipeline.FitsInput). ok is false when the limits refused it, the refusal already
// answered and the lease released; else the caller releases the lease (the zero Lease without a
// key).
func (x *exchange) admitQuery(req *llm.Request) (lease limit.Lease, ok bool) {
	if k := x.call.Key; k != nil {
		var err error
		if lease, err = x.p.Limits().Admit(x.r.Context(), k.Name); err != nil {
			x.failLimited(err)
			return limit.Lease{}, false
		}
	}
	if err := x.p.FitsInput(x.r.Context(), &lease, req); err != nil {
		x.failLimited(err)
		lease.Release() //nolint:errcheck // a store that cannot release leaves the limit stricter
		return limit.Lease{}, false
	}
	return lease, true
}

// failLimited answers err, a refusal of the key's limits or another failure, recording which.
func (x *exchange) failLimited(err error) {
	x.call.Record.RateLimited = apierr.IsRateLimit(err)
	x.fail(err)
}
