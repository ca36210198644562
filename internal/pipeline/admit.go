package pipeline

import (
	"context"
	"net/http"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
)

// anonymous is the caller without a key: every caller when no keys are configured, and the
// application itself on the in-process path. It is never modified.
var anonymous = &auth.Key{}

// Anonymous is the key of a caller that presents none where none is needed: every caller of a
// pipeline without keys, and in-process calls (the application linking layer0 is trusted). Its
// name is "" and it may use every model; the limits of the name "" and the global ones apply.
func Anonymous() *auth.Key { return anonymous }

// Admit runs the checks on a request's headers: their size, then authentication. It returns the
// caller's key, or a 413 or 401 *apierr.Error. Without keys every caller is Anonymous.
func (p *Pipeline) Admit(h http.Header) (*auth.Key, error) {
	if err := p.sizes.CheckHeader(h); err != nil {
		return nil, err
	}
	if p.keys.Len() == 0 {
		return anonymous, nil
	}
	return p.keys.Authenticate(h)
}

// fits refuses, without counting it, a request whose input cannot fit the lease's input-token
// limits: its lower bound (Bounder) is more than they hold or have left (limit.Lease.Fits).
func (p *Pipeline) fits(ctx context.Context, lease *limit.Lease, req *llm.Request) error {
	b, ok := p.tokens.(Bounder)
	if !ok || !lease.CountsInput() {
		return nil
	}
	lo, _ := b.RequestBounds(req)
	return lease.Fits(ctx, lo)
}

// FitsInput refuses, before anything counts its tokens, a query about a prompt (count_tokens,
// POST /v1/cache) whose input cannot fit lease's input-token limits, as Serve refuses a request
// (fits): counting costs no more tokenizer time than sending would. The caller has checked the
// size limits (Sizes) first, as Serve does.
func (p *Pipeline) FitsInput(ctx context.Context, lease *limit.Lease, req *llm.Request) error {
	return p.fits(ctx, lease, req)
}

// CountTokens resolves the request's model and counts its input tokens in that model's tokenizer.
func (p *Pipeline) CountTokens(req *llm.Request) (int, error) {
	name, ok := p.routes.Resolve(req.Model)
	if !ok {
		return 0, notFound(req.Model)
	}
	return p.count(name, req)
}

func (p *Pipeline) count(name string, req *llm.Request) (int, error) {
	if m := p.byID[name]; m != nil && m.Tokens != nil {
		return m.Tokens.CountTokens(req)
	}
	if p.tokens == nil {
		return 0, nil
	}
	return p.tokens.CountRequest(req), nil
}

// caller returns the key a request is served for, recorded in rec: key when the server
// authenticated the request already, else the one its header h presents (Admit).
func (p *Pipeline) caller(key *auth.Key, h http.Header, rec *Record) (*auth.Key, error) {
	if key == nil {
		var err error
		if key, err = p.Admit(h); err != nil {
			return nil, err
		}
	}
	rec.Key = key.Name
	if p.spend != nil {
		rec.Team = p.spend.Team(key.Name)
	}
	return key, nil
}

// permit resolves the model name a request asks for, recorded in rec, and checks that key may
// use it: permissions are on the names clients send.
func (p *Pipeline) permit(key *auth.Key, model string, rec *Record) (string, error) {
	name, ok := p.routes.Resolve(model)
	if !ok {
		return "", notFound(model)
	}
	rec.Model = name
	if err := key.Allow(name); err != nil {
		return "", err
	}
	return name, nil
}

// Picked is the replica /v1/layer/negotiate sends a legacy client to.
type Picked struct {
	// Name is the canonical spelling of the name asked for.
	Name string
	// Model is the model that would serve (a split's arm, or a fallback).
	Model string
	// Engine is the replica's name.
	Engine string
	// URL is the engine's base URL, "" for an engine embedded in this process.
	URL string
}

// Pick makes the routing decision Serve would make for model and key, without serving
// anything: for the legacy negotiate endpoint.
func (p *Pipeline) Pick(key *auth.Key, model string) (Picked, error) {
	name, ok := p.routes.Resolve(model)
	if !ok {
		return Picked{}, notFound(model)
	}
	if err := key.Allow(name); err != nil {
		return Picked{}, err
	}
	plan, err := p.routes.Plan(name, key.Name, 0)
	if err != nil {
		return Picked{}, err
	}
	a, err := plan.Next()
	if err != nil {
		return Picked{}, err
	}
	// A pick that serves nothing says nothing about the replica's health: report it as a
	// cancellation, which frees its outstanding count and counts neither way.
	plan.Report(context.Canceled, 0)
	return Picked{Name: name, Model: a.Model, Engine: a.Replica.Name, URL: p.engines[a.Replica].URL}, nil
}
