package openai

import (
	"bytes"

	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/responses"
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

// Speaks implements passthrough.Speaker: Chat Completions always, the Responses API when the engine
// serves it.
func (e *Engine) Speaks(f llm.Format) bool {
	return f == llm.FormatOpenAI || f == llm.FormatResponses && e.responses != ""
}

// responsesPolicy is the Responses API's answer: a response object, or its event stream of
// JSON objects whose response objects carry the model and, in the final one, the usage.
type responsesPolicy struct {
	finished bool // response.completed, response.incomplete or response.failed came
	ts, te   int  // the event's type
	rs, re   int  // the event's response object
	members  jsontext.Members
}

// visit notes the type and response members of an event (jsontext.ValidObjectMembers).
func (pl *responsesPolicy) visit(k []byte, esc bool, vs, ve int) {
	switch {
	case jsontext.KeyIs(k, esc, "type"):
		pl.ts, pl.te = vs, ve
	case jsontext.KeyIs(k, esc, "response"):
		pl.rs, pl.re = vs, ve
	}
}

// Answer implements passthrough.Policy.
func (*responsesPolicy) Answer(body []byte, u *llm.Usage) (passthrough.Answer, error) {
	f := scanAnswer(body)
	if !f.valid {
		return passthrough.Answer{}, nil // Forward refuses it
	}
	if f.us >= 0 {
		*u, _ = responses.ParseUsage(body[f.us:f.ue])
	}
	return f.answer(), nil
}

// End implements passthrough.Policy: a stream ends complete once its final response came.
func (pl *responsesPolicy) End([]byte) error {
	if !pl.finished {
		return errTruncated()
	}
	return nil
}

// Event implements passthrough.Policy.
func (pl *responsesPolicy) Event(ev *passthrough.Event, u *llm.Usage) error {
	data := ev.Data
	pl.ts, pl.te, pl.rs, pl.re = -1, -1, -1, -1
	if !pl.members.Valid(data, pl.visit) {
		return upstream.Malformed("a stream event that is not a JSON object", "")
	}
	var typ []byte
	if pl.ts >= 0 && pl.te-pl.ts >= 2 && data[pl.ts] == '"' {
		typ = data[pl.ts+1 : pl.te-1]
	}
	if !ev.Started && (string(typ) == "error" || string(typ) == "response.failed") {
		// Before any content: nothing reached the client, the request may fall back.
		return apierr.New(apierr.BadGateway, "the engine's Responses stream failed before any content: %.200s", data)
	}
	if rs := pl.rs; rs >= 0 && data[rs] == '{' {
		obj := data[rs:pl.re]
		if ms, me, ok, _ := jsontext.Field(obj, "model"); ok {
			ev.ModelStart, ev.ModelEnd = rs+ms, rs+me
		}
		switch string(typ) {
		case "response.completed", "response.incomplete", "response.failed":
			pl.finished = true
			if us, ue, ok, _ := jsontext.Field(obj, "usage"); ok && obj[us] == '{' {
				*u, _ = responses.ParseUsage(obj[us:ue])
			}
		}
	}
	switch {
	case responsesPrelude(typ):
		ev.Kind = passthrough.Prelude
	case bytes.HasSuffix(typ, deltaSuffix):
		ev.Delta = true // response.output_text.delta, response.function_call_arguments.delta, …
	}
	return nil
}

// deltaSuffix ends the type of a Responses stream's content delta events.
var deltaSuffix = []byte(".delta")

// responsesPrelude reports whether an event of type typ carries nothing for the client yet.
func responsesPrelude(typ []byte) bool {
	switch string(typ) {
	case "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added":
		return true
	}
	return false
}
