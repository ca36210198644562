// Package anthropic is the engine for the hosted Anthropic Messages API and anything that speaks
// it, another layer0 included: Generate encodes the canonical request as a Messages body, always
// streams from the engine and reads its SSE answer back into events; Forward is the pass-through
// path for Anthropic clients, which sends the client's bytes with the model name rewritten and
// streams the engine's events back unchanged while reading usage from message_start and
// message_delta.
package anthropic

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine/jsonmode"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	wire "github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// Path is the Messages endpoint under the engine's URL.
const Path = "/v1/messages"

// Version is the anthropic-version header sent to the engine.
const Version = "2023-06-01"

// DefaultMaxTokens is sent when a request has no max_tokens (OpenAI clients may omit it; the
// Messages API requires it).
const DefaultMaxTokens = 4096

// Options are the parts of an Engine that do not come from the config file.
type Options struct {
	// Model, when set, is the model name sent to the engine instead of the request's.
	Model string
	// Bearer sends the credential as Authorization: Bearer instead of x-api-key (layer0 peers
	// accept both; the hosted API wants x-api-key).
	Bearer bool
	// Upstream configures the HTTP client (TLS roots, environment lookup).
	Upstream upstream.Options
}

// Engine is a Messages API server. It is safe for concurrent use.
type Engine struct {
	upstream.Endpoint
	betas *betaHeaders // the pass-through calls' headers by anthropic-beta value
}

// codec is the Messages format, for Generate: a request without max_tokens gets
// DefaultMaxTokens.
var codec = upstream.Codec{
	AppendRequest: func(dst []byte, r *llm.Request) []byte {
		if r.MaxTokens <= 0 {
			r.MaxTokens = DefaultMaxTokens
		}
		return wire.AppendRequest(dst, r)
	},
	DecodeError: DecodeError, ReadResponse: wire.ReadResponse, ReadStream: wire.ReadStream,
}

// New returns the engine named name. The credential named by cfg.APIKeyEnv is read now, once.
func New(name string, cfg config.Engine, opts Options) (*Engine, error) {
	uo := opts.Upstream
	if !opts.Bearer {
		uo.AuthHeader = "X-Api-Key"
	}
	ep, err := upstream.NewEndpoint(name, cfg, uo, Path, http.Header{
		"Content-Type":      {"application/json"},
		"Accept":            {"text/event-stream, application/json"},
		"Anthropic-Version": {Version},
	})
	if err != nil {
		return nil, err
	}
	ep.Model = opts.Model
	return &Engine{Endpoint: ep, betas: new(betaHeaders)}, nil
}

// Format implements passthrough.Forwarder.
func (e *Engine) Format() llm.Format { return llm.FormatAnthropic }

// DecodeError is wire.DecodeError with one policy added: the engine refusing layer0's own
// credential (401, 403) is a gateway failure, not the client's, and its text is not passed on.
func DecodeError(status int, body []byte) *apierr.Error {
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return &apierr.Error{Kind: apierr.BadGateway,
			Message: "engine refused layer0's credentials (status " + strconv.Itoa(status) + ")"}
	}
	return wire.DecodeError(status, body)
}

// Generate implements engine.Engine.
//
// A request in JSON mode (llm.Request.ResponseFormat) is sent as jsonmode.Prepare makes it: the
// Messages API has no response_format.
func (e *Engine) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	up, prefilled := jsonmode.Prepare(req)
	if prefilled {
		sink = jsonmode.NewSink(sink)
	}
	return e.Endpoint.Generate(ctx, &up, sink, &codec)
}

// mergeUsage reads the usage object at obj (a JSON object's bytes) into dst.
func mergeUsage(dst *llm.Usage, obj []byte) {
	if s, e, ok, _ := jsontext.Field(obj, "usage"); ok {
		mergeUsageValue(dst, obj[s:e])
	}
}

// mergeUsageValue reads the usage object v into dst: each count it carries as an integer
// replaces dst's (message_delta carries only some). It decodes nothing else and allocates
// nothing (encoding/json cost five allocations a call, twice a stream).
func mergeUsageValue(dst *llm.Usage, v []byte) {
	if len(v) == 0 || v[0] != '{' {
		return
	}
	_ = jsontext.Scan(v, func(k []byte, esc bool, vs, ve int) {
		var d *int
		switch {
		case jsontext.KeyIs(k, esc, "input_tokens"):
			d = &dst.InputTokens
		case jsontext.KeyIs(k, esc, "output_tokens"):
			d = &dst.OutputTokens
		case jsontext.KeyIs(k, esc, "cache_creation_input_tokens"):
			d = &dst.CacheCreationInputTokens
		case jsontext.KeyIs(k, esc, "cache_read_input_tokens"):
			d = &dst.CacheReadInputTokens
		default:
			return
		}
		if n, ok := jsontext.Int(v[vs:ve]); ok {
			*d = n
		}
	})
}

// scanAnswer finds, in one scan of the top level of a message (a JSON object), its model and
// usage values (-1 when absent) and what kind of answer it is: a message (type "message"), an
// error object (type "error"), or neither. The same pass checks the whole message as
// jsontext.ValidObject does: valid is false for anything else, and then the other results say
// nothing.
func scanAnswer(obj []byte) (ms, me, us, ue int, kind answerKind, valid bool) {
	ms, me, us, ue = -1, -1, -1, -1
	kind = answerOther
	valid = jsontext.ValidObjectMembers(obj, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "model"):
			ms, me = vs, ve
		case jsontext.KeyIs(k, esc, "usage"):
			us, ue = vs, ve
		case jsontext.KeyIs(k, esc, "type"):
			switch string(obj[vs:ve]) {
			case `"message"`:
				kind = answerMessage
			case `"error"`:
				kind = answerError
			default:
				kind = answerOther
			}
		}
	})
	return ms, me, us, ue, kind, valid
}

// answerKind is what a non-streamed answer is.
type answerKind uint8

const (
	answerOther   answerKind = iota // neither a message nor an error: malformed
	answerMessage                   // a Messages API message
	answerError                     // an error object
)

// prelude reports whether an event is one that comes before any content: message_start,
// content_block_start (a block's content arrives in its deltas) and ping.
func prelude(name []byte) bool {
	switch string(name) {
	case "message_start", "content_block_start", "ping":
		return true
	}
	return false
}

var (
	evMessageStart = []byte("message_start")
	evMessageDelta = []byte("message_delta")
	evMessageStop  = []byte("message_stop")
	evBlockDelta   = []byte("content_block_delta")
	evError        = []byte("error")
	evPing         = []byte("ping")
)

// Forward implements passthrough.Forwarder: the body's top-level "model" is rewritten in place
// and every other byte is sent as the client wrote it, with the client's anthropic-beta headers
// and ?beta=true (passRequest); the engine's events come back unchanged but for the value of
// the model (message_start's message.model, a body's top-level model), which becomes the
// client's model name whatever the engine reported. The prelude (message_start,
// content_block_start, ping) is held until the first other event, and an error event is not
// passed on but returned, so an error before content leaves the client untouched and the
// caller can still fall back; after content the caller ends the stream with it (policy).
func (e *Engine) Forward(ctx context.Context, p *passthrough.Pass, w passthrough.Writer) (res passthrough.Result, err error) {
	// A body the pipeline checked is read again only to rename its model.
	ms, stream := -1, p.Stream
	var me int
	if !p.Checked || p.Model != "" && p.Model != p.ClientModel {
		hasModel := false
		err = jsontext.Scan(p.Body, func(k []byte, esc bool, vs, ve int) {
			switch {
			case jsontext.KeyIs(k, esc, "model"):
				hasModel, ms, me = true, vs, ve
			case jsontext.KeyIs(k, esc, "stream"):
				stream = string(p.Body[vs:ve]) == "true"
			}
		})
		if err != nil || !hasModel {
			return res, apierr.Invalid("model", "the request body must be a JSON object with a model")
		}
	}
	body := p.Body
	buf := e.C.Buffer()
	defer e.C.PutBuffer(buf)
	if ms >= 0 && p.Model != "" {
		b := append(*buf, p.Body[:ms]...)
		b = jsontext.AppendString(b, p.Model)
		b = append(b, p.Body[me:]...)
		*buf, body = b, b
	}
	path, hdr, err := e.passRequest(p)
	if err != nil {
		return res, err
	}
	resp, err := e.C.Do(ctx, &upstream.Request{Path: path, Header: hdr, Body: body, Stream: stream, DecodeError: DecodeError})
	if err != nil {
		return res, err
	}
	defer resp.Close()
	return passthrough.Forward(&policy{}, &passthrough.Source{Body: resp.Reader(), ContentType: resp.ContentType,
		Stream: stream, ClientModel: p.ClientModel, Err: resp.Err}, w)
}

// policy is the Messages API's pass-through: named events of JSON objects, message_start first
// (pings aside), usage in message_start and message_delta, an error event returned, the stream
// ended by message_stop.
type policy struct {
	started bool // message_start arrived
}

// Answer implements passthrough.Policy: an error object fails the call, and so does an object
// that is not a message (nothing of it reaches the client); the model and usage are read in the
// scan that checks the body.
func (*policy) Answer(body []byte, u *llm.Usage) (passthrough.Answer, error) {
	ms, me, us, ue, kind, valid := scanAnswer(body)
	if !valid {
		return passthrough.Answer{}, nil // Forward refuses it
	}
	switch kind {
	case answerError:
		return passthrough.Answer{}, DecodeError(0, body)
	case answerOther: // never passed on as it is: it may carry anything of the engine's
		return passthrough.Answer{Checked: true, Invalid: `not a message (its "type" is not "message")`}, nil
	}
	if us >= 0 {
		mergeUsageValue(u, body[us:ue])
	}
	if ms < 0 {
		return passthrough.Answer{Checked: true}, nil
	}
	return passthrough.Answer{ModelStart: ms, ModelEnd: me, Checked: true}, nil
}

// End implements passthrough.Policy: only message_stop ends a stream.
func (*policy) End([]byte) error {
	return apierr.Wrap(apierr.BadGateway, errors.New("anthropic: stream ended before message_stop"), "the engine's stream ended early")
}

// The shape of nearly every event of a stream: a text delta, as the Messages API writes it.
var (
	textDeltaHead = []byte(`{"type":"content_block_delta","index":`)
	textDeltaMid  = []byte(`,"delta":{"type":"text_delta","text":`)
)

// validEvent reports whether data is a JSON object, as jsontext.ValidObject does: a text delta
// written in the API's own shape has only its index and its text checked (the rest is those
// fixed bytes); any other event, or a delta written otherwise, is checked whole.
func validEvent(name, data []byte) bool {
	if bytes.Equal(name, evBlockDelta) && validTextDelta(data) {
		return true
	}
	return jsontext.ValidObject(data)
}

// validTextDelta reports whether data is exactly textDeltaHead, an index of 1 to 9 digits
// (no leading zero), textDeltaMid, a valid JSON string and "}}". False is not a verdict: the
// caller then checks data whole.
func validTextDelta(data []byte) bool { return textDeltaEnd(data) == len(data) }

// textDeltaEnd returns the length of the text delta in the API's own shape (validTextDelta's)
// at the start of b, or -1 when b does not begin with one, whole.
func textDeltaEnd(b []byte) int {
	rest, ok := bytes.CutPrefix(b, textDeltaHead)
	if !ok {
		return -1
	}
	n := 0
	for n < len(rest) && n < 10 && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 9 || (n > 1 && rest[0] == '0') {
		return -1
	}
	if rest, ok = bytes.CutPrefix(rest[n:], textDeltaMid); !ok {
		return -1
	}
	end := jsontext.ValidStringAt(rest, 0)
	if end <= 0 || len(rest) < end+2 || rest[end] != '}' || rest[end+1] != '}' {
		return -1
	}
	return len(b) - len(rest) + end + 2
}

// textDeltaEvent is how a text delta's event begins on the wire, its data on one line.
var textDeltaEvent = []byte("event: content_block_delta\ndata: ")

// Match implements passthrough.Shortcut: a text delta event written as the Messages API writes
// it (textDeltaEvent, validTextDelta's shape, a blank line), once message_start was seen —
// what Event would pass as content with nothing to read or rename.
func (pl *policy) Match(buf []byte) passthrough.Matched {
	if !pl.started {
		return passthrough.Matched{}
	}
	rest, ok := bytes.CutPrefix(buf, textDeltaEvent)
	if !ok {
		return passthrough.Matched{}
	}
	end := textDeltaEnd(rest)
	if end < 0 || len(rest) < end+2 || rest[end] != '\n' || rest[end+1] != '\n' {
		return passthrough.Matched{}
	}
	return passthrough.Matched{N: len(textDeltaEvent) + end + 2, Delta: true}
}

// Event implements passthrough.Policy.
func (pl *policy) Event(ev *passthrough.Event, u *llm.Usage) error {
	name, data := ev.Name, ev.Data
	if bytes.Equal(name, evError) {
		return DecodeError(0, data)
	}
	// The stream's shape: named events of JSON objects, each checked whole (after the first
	// byte too: a broken event must end the stream with an error, not reach the client),
	// message_start first (pings aside).
	if len(name) == 0 || !validEvent(name, data) {
		return upstream.Malformed("a stream event that is not a named JSON object", "")
	}
	if !pl.started && !bytes.Equal(name, evMessageStart) && !bytes.Equal(name, evPing) {
		return upstream.Malformed("a stream that does not begin with message_start", "")
	}
	switch {
	case bytes.Equal(name, evMessageStart):
		pl.started = true
		if s, e, ok, _ := jsontext.Field(data, "message"); ok {
			ms, me, us, ue, _, _ := scanAnswer(data[s:e]) // checked whole by validEvent
			if us >= 0 {
				mergeUsageValue(u, data[s+us:s+ue])
			}
			if ms >= 0 {
				ev.ModelStart, ev.ModelEnd = s+ms, s+me
			}
		}
	case bytes.Equal(name, evBlockDelta):
		ev.Delta = true
	case bytes.Equal(name, evMessageDelta):
		mergeUsage(u, data)
	case bytes.Equal(name, evMessageStop):
		ev.Kind = passthrough.Last
		return nil
	}
	if prelude(name) {
		ev.Kind = passthrough.Prelude
	}
	return nil
}
