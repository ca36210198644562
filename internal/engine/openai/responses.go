package openai

import (
	"io"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/responses"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// The Responses API pass-through, for an engine configured with responses: true (one that
// serves POST /v1/responses itself): the client's body goes to it with only the model name
// rewritten, and its answer comes back byte for byte but for the model name of the response
// objects, with usage read from the final one. A stream's opening events (response.created,
// response.in_progress, the first item and part added) are held until the first content, so an
// engine that fails before any (an error event, response.failed) leaves the client untouched
// and the request free to fall back.

// responsesPath returns the Responses endpoint beside the Chat Completions one.
func responsesPath(chat string) string {
	return strings.TrimSuffix(chat, "/chat/completions") + "/responses"
}

// Speaks implements engine.Speaker: Chat Completions always, the Responses API when the engine
// serves it.
func (e *Engine) Speaks(f llm.Format) bool {
	return f == llm.FormatOpenAI || f == llm.FormatResponses && e.responses != ""
}

// copyResponses copies a Responses answer to out: a response object, or its event stream.
func (pr *prepared) copyResponses(r io.Reader, out *upstream.Out) (res engine.PassResult, err error) {
	defer func() { res.Bytes = out.N }()
	if err := upstream.CheckContentType(out.ContentType, pr.stream); err != nil {
		return res, err
	}
	if !upstream.IsSSE(out.ContentType) {
		body, err := pr.readJSON(r)
		if err != nil {
			return res, err
		}
		if pr.stream {
			return res, upstream.StreamAnsweredJSON()
		}
		f := scanAnswer(body)
		if f.us >= 0 {
			res.Usage, _ = responses.ParseUsage(body[f.us:f.ue])
		}
		if err := pr.rn.WriteJSON(out, body, f.ms, f.me); err != nil {
			return res, err
		}
		return res, out.Flush()
	}
	res.Stream = true
	er := sse.NewReader(r)
	finished := false
	for {
		raw, name, data, rerr := er.Next()
		if err := streamErr(rerr); err == io.EOF {
			if !finished {
				return res, errTruncated()
			}
			return res, out.Release()
		} else if err != nil {
			return res, err
		}
		if len(data) == 0 && len(name) == 0 { // a comment
			if out.Started() || !out.Hold(raw) {
				if _, err := out.Write(raw); err != nil {
					return res, err
				}
			}
			continue
		}
		if !jsontext.ValidObject(data) {
			return res, upstream.Malformed("a stream event that is not a JSON object", "")
		}
		typ := eventType(data)
		if !out.Started() && (typ == "error" || typ == "response.failed") {
			// Before any content: nothing reached the client, the request may fall back.
			return res, apierr.New(apierr.BadGateway, "the engine's Responses stream failed before any content: %.200s", data)
		}
		ev := raw
		if rs, re, ok, _ := jsontext.Field(data, "response"); ok && data[rs] == '{' {
			obj := data[rs:re]
			if ms, me, ok, _ := jsontext.Field(obj, "model"); ok {
				ev = pr.rn.EventAt(raw, data, rs+ms, rs+me)
			}
			switch typ {
			case "response.completed", "response.incomplete", "response.failed":
				finished = true
				if us, ue, ok, _ := jsontext.Field(obj, "usage"); ok && obj[us] == '{' {
					res.Usage, _ = responses.ParseUsage(obj[us:ue])
				}
			}
		}
		if out.Started() || !responsesPrelude(typ) || !out.Hold(ev) {
			if _, err := out.Write(ev); err != nil {
				return res, err
			}
		}
		if err := flushIdle(er, out); err != nil {
			return res, err
		}
	}
}

// eventType returns a Responses event's type.
func eventType(data []byte) string {
	s, e, ok, _ := jsontext.Field(data, "type")
	if !ok || e-s < 2 || data[s] != '"' {
		return ""
	}
	return string(data[s+1 : e-1])
}

// responsesPrelude reports whether an event of type typ carries nothing for the client yet.
func responsesPrelude(typ string) bool {
	switch typ {
	case "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added":
		return true
	}
	return false
}
