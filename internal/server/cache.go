package server

import (
	"math"
	"net/http"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// cacheQuery serves /v1/cache: how much of a prompt the best replica of its model holds in its
// prefix KV cache, as the prefix index estimates it, without running anything. HEAD (or GET)
// takes the prompt in the query — model, system, user — and answers in the headers
// X-Cache-Hit and X-Cache-Ratio (GET adds the JSON body); POST takes a Messages-shaped body
// (Anthropic format, max_tokens optional) and answers the headers and
// {"hit","ratio","cached_tokens","prompt_tokens","replica"}. Like any request it is
// authenticated (by serve) and takes a request and a concurrency slot of the key's limits. It
// answers for what the key itself sent, unless the model shares across keys, and for the model
// a message would go to (an offload target, by directive or header, included).
func (x *exchange) cacheQuery() {
	rec := &x.call.Record
	rec.Format = llm.FormatAnthropic
	var req *llm.Request
	switch x.r.Method {
	case http.MethodHead, http.MethodGet:
		q := x.r.URL.Query()
		req = &llm.Request{Format: llm.FormatAnthropic, Model: q.Get("model")}
		if req.Model == "" {
			x.fail(&apierr.Error{Kind: apierr.InvalidRequest, Param: "model", Message: "model: query parameter required"})
			return
		}
		if s := q.Get("system"); s != "" {
			req.System = []llm.Block{{Type: llm.BlockText, Text: s}}
		}
		if u := q.Get("user"); u != "" {
			req.Messages = []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: u}}}}
		}
		if err := x.p.Sizes().Check(req); err != nil {
			x.fail(err)
			return
		}
	case http.MethodPost:
		body, ok := x.readBody()
		if !ok {
			return
		}
		var err error
		if req, err = anthropic.DecodeCountTokens(body); err != nil {
			x.fail(err)
			return
		}
		if err := x.p.Sizes().Check(req); err != nil {
			x.fail(err)
			return
		}
	default:
		x.w.Header().Set("Allow", "GET, HEAD, POST")
		x.fail(&apierr.Error{Kind: apierr.MethodNotAllowed, Code: "method_not_allowed",
			Message: x.r.Method + " /v1/cache: method not allowed, use HEAD, GET or POST"})
		return
	}
	m, err := x.model(req.Model) // unknown, or not this key's to use
	if err != nil {
		x.fail(err)
		return
	}
	rec.Model = m.ID
	lease, ok := x.admitQuery(req)
	if !ok {
		return
	}
	defer lease.Release() //nolint:errcheck // a store that cannot release leaves the limit stricter
	key := x.call.Key
	if key == nil {
		key = pipeline.Anonymous()
	}
	match, err := x.p.CacheLookup(key, x.r.Header, req)
	if err != nil {
		x.fail(err)
		return
	}
	var b [16]byte
	ratio := string(appendRatio(b[:0], match))
	h := x.w.Header()
	h["X-Cache-Hit"] = []string{strconv.FormatBool(match.Hit())}
	h["X-Cache-Ratio"] = []string{ratio}
	if x.r.Method == http.MethodHead {
		// No body; the headers are the answer (writeFull writes none for HEAD).
		x.writeFull(http.StatusOK, "application/json", nil)
		return
	}
	x.writeFull(http.StatusOK, "application/json", x.output(func(out []byte) []byte {
		return appendCacheMatch(out, match, ratio)
	}))
}

// appendRatio appends the cached share of the prompt with three decimals, rounded down, so
// that 1.000 means the whole prompt.
func appendRatio(dst []byte, m prefix.Match) []byte {
	r := 0.0
	if m.PromptTokens > 0 {
		r = math.Floor(float64(m.CachedTokens)*1000/float64(m.PromptTokens)) / 1000
	}
	return strconv.AppendFloat(dst, r, 'f', 3, 64)
}

// appendCacheMatch appends the JSON answer of /v1/cache.
func appendCacheMatch(dst []byte, m prefix.Match, ratio string) []byte {
	dst = append(dst, `{"hit":`...)
	dst = strconv.AppendBool(dst, m.Hit())
	dst = append(dst, `,"ratio":`...)
	dst = append(dst, ratio...)
	dst = append(dst, `,"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(m.CachedTokens), 10)
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(m.PromptTokens), 10)
	dst = append(dst, `,"replica":`...)
	dst = jsontext.AppendString(dst, m.Name)
	return append(dst, '}', '\n')
}
