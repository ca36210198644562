package server

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/conversation"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/openai"
	"github.com/layer0ai/layer0/internal/wire/responses"
)

// The OpenAI Responses API: POST /v1/responses is a front like the others (its decoder puts a
// previous response's conversation before the input), and a stored response is kept once it
// reached the client whole; GET and DELETE /v1/responses/{id} read and remove it. Every stored
// response belongs to the key that made it: another key gets the 404 of an unknown id.

// responseCall is a Responses request's own state beside the canonical call.
type responseCall struct {
	meta   responses.Meta
	extras *responses.Extras
	sw     *responses.StreamWriter // the stream's writer, once it began
	obj    []byte                  // the complete answer's response object
}

var responsesFront = &front{
	format: llm.FormatResponses,
	passes: true,
	// Only a request that keeps no state passes through to an engine that speaks Responses: a
	// stored response, or one continued, is layer0's (its id, its owner), never the engine's.
	mayPass: func(x *exchange) bool { return !x.rsp.extras.Store && x.rsp.extras.PreviousResponseID == "" },
	decode: func(x *exchange, body []byte) (*llm.Request, error) {
		req, extras, err := responses.DecodeRequestText(x.bodyText(body), x.history)
		if err != nil {
			return nil, err
		}
		x.rsp = &responseCall{extras: extras,
			meta: responses.Meta{ID: responses.NewID(), CreatedAt: time.Now().Unix(), Model: req.Model, Extras: extras}}
		x.w.Header().Set("X-Layer0-Response-Id", x.rsp.meta.ID)
		return req, nil
	},
	contentType: jsonOrSSE,
	answer: func(x *exchange, b []byte, r *llm.Response, _ string) []byte {
		n := len(b)
		b = responses.AppendResponse(b, r, &x.rsp.meta)
		x.rsp.obj = b[n:]
		return b
	},
	stream: func(x *exchange, out *streamWriter, _ string) (encoder, error) {
		x.rsp.sw = responses.NewStreamWriter(&x.rsp.meta, out, out.Flush)
		return x.rsp.sw, nil
	},
	error: func(b []byte, e *apierr.Error, _ string) ([]byte, int) {
		return responses.AppendError(b, e), responses.Status(e)
	},
	served: (*exchange).storeResponse,
}

// ownerOf is the name a stored response is owned by: the caller's key ("" without keys).
func (x *exchange) ownerOf() string {
	if k := x.call.Key; k != nil {
		return k.Name
	}
	return ""
}

// history resolves a previous_response_id for the caller: its conversation, or the 404 of an id
// the caller cannot see.
func (x *exchange) history(id string) (*responses.History, error) {
	st := x.stored
	if st == nil {
		return nil, conversation.NotFound(id)
	}
	e, err := st.Get(x.r.Context(), x.ownerOf(), id)
	if err != nil {
		var ae *apierr.Error
		if errors.As(err, &ae) {
			ae.Param = "previous_response_id"
		}
		return nil, err
	}
	return &responses.History{System: e.System, Messages: e.Messages}, nil
}

// storeResponse keeps a response that reached the client whole, when the request asked for it
// (store, the API's default): the object a GET returns and the conversation with the answer as
// its last turn. A response that could not be stored was still served; the failure is logged.
func (x *exchange) storeResponse() {
	rc, st := x.rsp, x.stored
	if rc == nil || st == nil || !rc.extras.Store || x.call.Record.Passed {
		return
	}
	var content []llm.Block
	obj := rc.obj
	if rc.sw != nil {
		if !rc.sw.Done() {
			return
		}
		content, obj = rc.sw.Response().Content, rc.sw.Object()
	} else {
		content = x.col.Response.Content
	}
	req := x.call.Request
	msgs := make([]llm.Message, 0, len(req.Messages)+1)
	msgs = append(msgs, req.Messages...)
	if turn := assistantTurn(content); len(turn) > 0 {
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: turn})
	}
	e := &conversation.Entry{ID: rc.meta.ID, Owner: x.ownerOf(), System: rc.extras.System, Messages: msgs,
		Object: append([]byte(nil), obj...)}
	if err := st.Put(x.r.Context(), e); err != nil {
		x.s.logger.Warn("response not stored", "request_id", x.call.Record.RequestID, "err", err)
	}
}

// assistantTurn is the answer as the next request's history holds it: its text and its tool
// calls under the call ids the client saw, which its function_call_output items name.
func assistantTurn(content []llm.Block) []llm.Block {
	out := make([]llm.Block, 0, len(content))
	for _, b := range content {
		switch b.Type {
		case llm.BlockText:
			if b.Text != "" {
				out = append(out, llm.Block{Type: llm.BlockText, Text: b.Text})
			}
		case llm.BlockToolUse:
			in := b.Input
			if len(in) == 0 {
				in = []byte("{}")
			}
			out = append(out, llm.Block{Type: llm.BlockToolUse, ID: openai.CallID(b.ID), Name: b.Name, Input: in})
		}
	}
	return out
}

// storedResponse serves GET and DELETE /v1/responses/{id}.
func (x *exchange) storedResponse(id string) {
	st := x.stored
	switch x.r.Method {
	case http.MethodGet, http.MethodHead:
		if st == nil {
			x.fail(conversation.NotFound(id))
			return
		}
		e, err := st.Get(x.r.Context(), x.ownerOf(), id)
		if err != nil {
			x.fail(err)
			return
		}
		x.writeFull(http.StatusOK, "application/json", x.output(func(b []byte) []byte { return append(b, e.Object...) }))
	case http.MethodDelete:
		if st == nil {
			x.fail(conversation.NotFound(id))
			return
		}
		if err := st.Delete(x.r.Context(), x.ownerOf(), id); err != nil {
			x.fail(err)
			return
		}
		x.writeFull(http.StatusOK, "application/json", x.output(func(b []byte) []byte { return responses.AppendDeleted(b, id) }))
	default:
		x.w.Header().Set("Allow", "GET, DELETE")
		x.fail(&apierr.Error{Kind: apierr.MethodNotAllowed, Code: "method_not_allowed",
			Message: x.r.Method + " " + sanitize(x.r.URL.Path) + ": method not allowed, use GET or DELETE"})
	}
}

// responseID returns the id of a /v1/responses/{id} path, and whether it is one (a deeper path,
// such as …/input_items, is not).
func responseID(path string) (string, bool) {
	id, ok := strings.CutPrefix(path, "/v1/responses/")
	return id, ok && id != "" && !strings.Contains(id, "/")
}
