package pipeline

import (
	"net/http"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/directive"
	"github.com/layer0ai/layer0/internal/llm"
)

// OffloadHeader names an offload target for one request, as the offload directive does.
const OffloadHeader = "X-Offload-Target"

// Directives says which directives a request carried, as bits (Record.Directives).
type Directives uint8

// The directive bits.
const (
	DirTemperature Directives = 1 << iota
	DirTruncate
	DirJSONMode
	DirOffload
)

// String lists the directives, comma-separated, in a fixed order ("" for none).
func (d Directives) String() string {
	var names []string
	for i, n := range []string{directive.NameTemperature, directive.NameTruncate, directive.NameJSONMode, directive.NameOffload} {
		if d&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// stage is the state the directive and context stages keep for one call: the request as they
// rewrote it, which the engines then see instead of Call.Request.
type stage struct {
	set     directive.Set
	edited  bool        // edit is the engines' request; the pass-through path is off
	edit    llm.Request // a shallow copy of Call.Request with the stages' changes
	temp    float64     // the temperature directive's value, edit.Temperature points here
	offload string      // the offload target's name
}

// request returns the request the engines see: the stages' rewrite, or the client's.
func (c *Call) request() *llm.Request {
	if c.st.edited {
		return &c.st.edit
	}
	return c.Request
}

// applyDirectives is the directives stage: it finds the directives of the system prompt and the
// X-Offload-Target header, applies them to a copy of the request with the directives stripped,
// and returns the request and the name to serve from here on. A directive wins over the same
// setting given any other way: the temperature directive over the temperature field,
// json_mode over response_format, the offload directive over the header. An offload target
// is a name of the configuration (offload_targets) standing for a model, alias or split; the
// caller's key must be allowed to use it. Without directives nor header it allocates nothing.
func (p *Pipeline) applyDirectives(c *Call, key *auth.Key, name string) (*llm.Request, string, error) {
	st := &c.st
	*st = stage{}
	req := c.Request
	set, system, err := directive.Parse(req)
	if err != nil {
		return nil, "", err
	}
	hdr := headerValue(c.Header, OffloadHeader)
	if set.Empty() && hdr == "" {
		return req, name, nil
	}
	rec := &c.Record
	target, param := set.Offload, "system"
	if target != "" {
		rec.Directives |= DirOffload
	} else if hdr != "" {
		target, param = hdr, OffloadHeader
	}
	if target != "" {
		model, ok := p.offload[target]
		if !ok {
			return nil, "", &apierr.Error{Kind: apierr.InvalidRequest, Param: param, Code: "invalid_directive",
				Message: param + ": offload target " + quote(target) + " is not configured"}
		}
		to, ok := p.routes.Resolve(model)
		if !ok {
			return nil, "", notFound(model)
		}
		if err := key.Allow(to); err != nil {
			return nil, "", err
		}
		// The record outlives the request (the access log, the traces), and target may point
		// into the request's body buffer, which the next request reuses.
		target = strings.Clone(target)
		st.offload, rec.Offload = target, target
		name = to
	}
	if set.Empty() {
		// Only the header: the request itself is unchanged (and may still pass through).
		return req, name, nil
	}
	st.set = set
	st.edited = true
	st.edit = *req
	e := &st.edit
	e.System = system
	if set.HasTemperature {
		rec.Directives |= DirTemperature
		st.temp = set.Temperature
		e.Temperature = &st.temp
	}
	if set.Truncate {
		rec.Directives |= DirTruncate
	}
	if set.HasJSONMode {
		rec.Directives |= DirJSONMode
		switch {
		case !set.JSONMode:
			e.ResponseFormat = llm.ResponseFormat{}
		case !e.ResponseFormat.JSON():
			e.ResponseFormat = llm.ResponseFormat{Type: llm.ResponseJSONObject}
		}
	}
	return e, name, nil
}

// headerValue is h.Get(k) for a canonical k, without canonicalizing it (no allocation).
func headerValue(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}
