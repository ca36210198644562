package anthropic

import (
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/upstream"
)

// BetaQuery is the query a pass-through call adds to the path when the client's had it: the
// hosted API's clients (Claude Code among them) call /v1/messages?beta=true.
const BetaQuery = "?beta=true"

// maxBetaHeaders bounds the distinct anthropic-beta values whose prepared headers are kept.
const maxBetaHeaders = 64

// betaHeaders keeps the request headers of pass-through calls by their anthropic-beta value:
// the fixed headers plus that one, prepared once, since a client sends the same list on every
// request. Past maxBetaHeaders values, a call prepares its own.
type betaHeaders struct {
	mu sync.Mutex
	m  map[string]*upstream.Header
}

// passRequest returns the path and headers of the pass-through call p: the client's
// anthropic-beta headers (joined with commas) and its ?beta=true go to the engine as they came,
// so that the features they turn on are the engine's to serve. Nothing else of the client's
// headers or query is sent.
func (e *Engine) passRequest(p *passthrough.Pass) (string, *upstream.Header, error) {
	path := e.Path
	if betaQuery(p.Query) {
		path += BetaQuery
	}
	betas := p.Header.Values("Anthropic-Beta")
	if len(betas) == 0 {
		return path, e.Header, nil
	}
	v := strings.Join(betas, ",")
	b := e.betas
	b.mu.Lock()
	h, ok := b.m[v]
	b.mu.Unlock()
	if ok {
		return path, h, nil
	}
	hdr := http.Header{
		"Content-Type":      {"application/json"},
		"Accept":            {"text/event-stream, application/json"},
		"Anthropic-Version": {Version},
		"Anthropic-Beta":    {v},
	}
	h, err := upstream.NewHeader(hdr)
	if err != nil {
		return "", nil, apierr.Wrap(apierr.InvalidRequest, err, "anthropic-beta: not a valid header value")
	}
	b.mu.Lock()
	if b.m == nil {
		b.m = make(map[string]*upstream.Header)
	}
	if len(b.m) < maxBetaHeaders {
		b.m[v] = h
	}
	b.mu.Unlock()
	return path, h, nil
}

// betaQuery reports whether the raw query q has beta=true.
func betaQuery(q string) bool {
	if q == "" {
		return false
	}
	v, err := url.ParseQuery(q)
	return err == nil && v.Get("beta") == "true"
}
