package pipeline

import (
	"errors"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/trim"
)

// ContextPolicy is a model's policy for an input larger than every context window of its
// fallback chain.
type ContextPolicy struct {
	// Truncate cuts such an input to fit instead of refusing it with a 400 (a request's
	// truncate directive allows it either way).
	Truncate bool
	// Fixed cuts texts at the token budget instead of at section, paragraph and sentence
	// boundaries.
	Fixed bool
	// MaxTokensPerShard caps the tokens kept of any one text that has to be cut; 0 is no cap.
	MaxTokensPerShard int
}

// ContextRecord is what context planning did to a request.
type ContextRecord struct {
	// Truncated is set when the input was cut.
	Truncated bool
	// Before and After are the input tokens before and after the cut.
	Before, After int
	// TurnsDropped counts the conversation turns dropped whole.
	TurnsDropped int
}

// Header is the X-Layer0-Context header's value: "truncated; before=N; after=M", or "" when
// nothing was cut.
func (r *ContextRecord) Header() string {
	if !r.Truncated {
		return ""
	}
	return "truncated; before=" + strconv.Itoa(r.Before) + "; after=" + strconv.Itoa(r.After)
}

// fitsUncounted reports whether req's prompt fits every context window name may be served with
// without counting its tokens: no model has a window, or the Bounder's upper bound on the
// count (a token holds at least one byte: RequestBounds, one pass over the blocks) is within
// the smallest. A model whose engine tokenizes prompts itself is counted: its chat template
// adds tokens the bound does not know.
func (p *Pipeline) fitsUncounted(name string, req *llm.Request) bool {
	if !p.routes.Windowed(name) {
		return true
	}
	b, ok := p.tokens.(Bounder)
	if m := p.byID[name]; (m != nil && m.Tokens != nil) || !ok {
		return false
	}
	_, hi := b.RequestBounds(req)
	return p.routes.Fits(name, hi)
}

// planContext is the context stage: when the input of req (input tokens, counted in name's
// tokenizer) is larger than the budget — the largest context window that can serve name, or
// the truncate directive's budget when smaller — and cutting is allowed (the truncate
// directive, or the model's context.overflow: truncate), it cuts the input to the budget and
// returns the request the engines see and its tokens. Otherwise it returns req and input as
// they are, and the route plan refuses what does not fit with a 400 stating the sizes.
func (p *Pipeline) planContext(c *Call, name string, req *llm.Request, input int) (*llm.Request, int, error) {
	st := &c.st
	budget := p.routes.Window(name)
	if b := st.set.TruncateBudget; b > 0 && (budget == 0 || b < budget) {
		budget = b
	}
	if budget == 0 || input <= budget {
		return req, input, nil
	}
	var pol ContextPolicy
	if m := p.byID[name]; m != nil {
		pol = m.Context
	}
	if !st.set.Truncate && !pol.Truncate {
		return req, input, nil
	}
	out, res, err := trim.Cut(req, trim.Options{Budget: budget, Fixed: pol.Fixed, MaxPerText: pol.MaxTokensPerShard,
		Count: func(r *llm.Request) (int, error) { return p.count(name, r) }})
	if errors.Is(err, trim.ErrTooSmall) {
		return nil, 0, &apierr.Error{Kind: apierr.InvalidRequest, Param: "messages", Code: "context_length_exceeded",
			Message: "prompt is too long: " + strconv.Itoa(input) + " tokens > " + strconv.Itoa(budget) +
				" maximum, and it cannot be cut to fit (" + err.Error() + ")", Cause: err}
	}
	if err != nil {
		return nil, 0, err
	}
	if out == req {
		return req, input, nil
	}
	if !st.edited {
		st.edited, st.edit = true, *req
	}
	st.edit.Messages = out.Messages
	c.Record.Context = ContextRecord{Truncated: true, Before: input, After: res.After, TurnsDropped: res.TurnsDropped}
	return &st.edit, res.After, nil
}
