package openai

import (
	"bytes"
	"context"
	"sync"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	wire "github.com/layer0ai/layer0/internal/wire/openai"
)

// The pass-through path of Chat Completions (the Responses API's is in responses.go): the
// client's body with its model rewritten, and a policy over passthrough.Forward's loop.

var (
	done       = []byte("[DONE]")
	finishKey  = []byte(`finish_reason"`) // searched without its opening quote: see hasFinish
	usageKey   = []byte(`"usage"`)
	choicesKey = []byte(`choices"`)
	usageOpt   = []byte(`"stream_options":{"include_usage":true},`)
)

// Forward implements passthrough.Forwarder. The body is not decoded: one scan of its top level
// finds "model", "stream" and "stream_options", the model value is rewritten in place, and a
// streaming request that did not ask for usage gets stream_options.include_usage added so that
// usage can be read — the usage-only chunk this adds is then held back from the client.
// Chunks pass through byte for byte except for the value of their top-level "model", which
// becomes the client's model name whatever the engine reported (passthrough.Renamer); an error
// chunk is not passed on but returned, so that the caller reports it in the client's format (or
// falls back).
func (e *Engine) Forward(ctx context.Context, p *passthrough.Pass, w passthrough.Writer) (passthrough.Result, error) {
	if p.Format == llm.FormatResponses {
		return e.forward(ctx, p, w, e.responses, false)
	}
	return e.forward(ctx, p, w, e.Path, true)
}

// forward is the pass-through shared by both formats: it builds the engine's body from the
// client's (prepareBody, with usage for Chat Completions), posts it to path and copies the
// answer to w under the format's policy.
func (e *Engine) forward(ctx context.Context, p *passthrough.Pass, w passthrough.Writer, path string, chat bool) (passthrough.Result, error) {
	buf := e.C.Buffer()
	defer e.C.PutBuffer(buf)
	pr, err := prepareBody(*buf, p, chat)
	if err != nil {
		return passthrough.Result{}, err
	}
	*buf = pr.body
	resp, err := e.C.Do(ctx, &upstream.Request{Path: path, Header: e.Header, Body: pr.body, Stream: pr.stream, DecodeError: wire.DecodeError})
	if err != nil {
		return passthrough.Result{}, err
	}
	defer resp.Close()
	src := passthrough.Source{Body: resp.Reader(), ContentType: resp.ContentType, Stream: pr.stream,
		ClientModel: p.ClientModel, Err: resp.Err}
	if !chat {
		return passthrough.Forward(&responsesPolicy{}, &src, w)
	}
	pl := newChatPolicy(pr.inject)
	defer pl.release()
	return passthrough.Forward(pl, &src, w)
}

// prepared is a pass-through request ready to send.
type prepared struct {
	body   []byte
	stream bool
	inject bool // stream_options was added: hold back the usage-only chunk
}

// prepare builds the engine's Chat Completions body from the client's in dst.
func prepare(dst []byte, p *passthrough.Pass) (prepared, error) { return prepareBody(dst, p, true) }

// prepareBody builds the engine's body from the client's in dst: the model rewritten and, when
// usage is asked for (Chat Completions, which reports it in a stream only when asked), a
// streaming request's stream_options.include_usage added.
func prepareBody(dst []byte, p *passthrough.Pass, usage bool) (prepared, error) {
	var pr prepared
	var ms, me int
	hasModel, hasOpts := false, false
	err := jsontext.Scan(p.Body, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "model"):
			hasModel, ms, me = true, vs, ve
		case jsontext.KeyIs(k, esc, "stream"):
			pr.stream = string(p.Body[vs:ve]) == "true"
		case jsontext.KeyIs(k, esc, "stream_options"):
			hasOpts = true
		}
	})
	if err != nil || !hasModel {
		return pr, apierr.Invalid("model", "the request body must be a JSON object with a model")
	}
	pr.inject = usage && pr.stream && !hasOpts
	open := bytes.IndexByte(p.Body, '{') + 1
	b := append(dst, p.Body[:open]...)
	if pr.inject {
		b = append(b, usageOpt...)
	}
	if p.Model != "" {
		b = append(b, p.Body[open:ms]...)
		b = jsontext.AppendString(b, p.Model)
		b = append(b, p.Body[me:]...)
	} else {
		b = append(b, p.Body[open:]...)
	}
	pr.body = b
	return pr, nil
}

// chatPolicy is Chat Completions' stream: data: chunks, each a JSON object (checked whole, as
// UTF-8, before and after the attempt commits: a broken chunk after the first byte ends the
// stream with an error instead of reaching the client) with choices (unless it is an error, or
// the usage-only chunk of an engine that leaves them out), ended by data: [DONE] once a
// finish_reason came. The chunks before the first content (the role chunk) are prelude, so
// that an error chunk right after them leaves the client untouched and the caller can still
// fall back.
type chatPolicy struct {
	inject   bool // stream_options was added: drop the usage-only chunk
	finished bool // a finish_reason came
	c        chunk
	members  jsontext.Members // the chunks' common first members, checked once
	last     template         // the last content chunk that can be one, for Match
}

// chatPolicies keeps the policies of ended streams with the buffers they grew (the chunks'
// common members, the template): a stream then allocates none for its policy.
var chatPolicies = sync.Pool{New: func() any { return new(chatPolicy) }}

// newChatPolicy returns a policy for one stream, pooled; release gives it back once Forward
// returned.
func newChatPolicy(inject bool) *chatPolicy {
	pl := chatPolicies.Get().(*chatPolicy)
	pl.inject = inject
	return pl
}

// maxPooledTemplate bounds the template buffer a pooled policy keeps: one grown by a large
// chunk is let go.
const maxPooledTemplate = 64 << 10

// release pools pl, reset.
func (pl *chatPolicy) release() {
	pl.reset()
	chatPolicies.Put(pl)
}

// reset makes pl a new stream's policy, as the zero value, keeping its buffers.
func (pl *chatPolicy) reset() {
	pl.members.Reset()
	b := pl.last.b[:0]
	if cap(b) > maxPooledTemplate {
		b = nil
	}
	*pl = chatPolicy{members: pl.members, last: template{b: b}}
}

// chunk is where a chunk's top-level members lie, -1 where absent, found as it is checked.
type chunk struct {
	data []byte
	answerFields
	maybeErr bool
}

// visit notes one top-level member of the chunk (jsontext.ValidObjectMembers). maybeErr says
// the chunk may be an error wire.StreamError reads: a key encoding/json may take for "error"
// or "object" (it matches keys without regard to case, and no non-ASCII letter folds to one
// of theirs), the latter with the value "error".
func (c *chunk) visit(k []byte, esc bool, vs, ve int) {
	if esc {
		c.maybeErr = true
		c.note(k, esc, vs, ve)
		return
	}
	switch len(k) {
	case 5:
		switch {
		case string(k) == "model":
			c.ms, c.me = vs, ve
		case string(k) == "usage":
			c.us, c.ue = vs, ve
		case bytes.EqualFold(k, errorKey):
			c.maybeErr = true
		}
	case 6:
		if bytes.EqualFold(k, objectKey) {
			v := c.data[vs:ve]
			c.maybeErr = c.maybeErr || string(v) == `"error"` || bytes.IndexByte(v, '\\') >= 0
		}
	case 7:
		if string(k) == "choices" {
			c.cs, c.ce = vs, ve
		}
	}
}

var (
	errorKey  = []byte("error")
	objectKey = []byte("object")
)

// Event implements passthrough.Policy.
func (pl *chatPolicy) Event(ev *passthrough.Event, u *llm.Usage) error {
	data := ev.Data
	if bytes.Equal(data, done) {
		if !pl.finished {
			return errTruncated() // [DONE] without a finish_reason: the answer was cut
		}
		ev.Kind = passthrough.Last
		return nil
	}
	c := &pl.c
	*c = chunk{data: data, answerFields: noFields}
	if !pl.members.Valid(data, c.visit) {
		return upstream.Malformed("a stream chunk that is not a JSON object", "")
	}
	if c.maybeErr {
		if ae := wire.StreamError(data); ae != nil {
			return ae
		}
	}
	if c.cs < 0 && c.us < 0 && !bytes.Contains(data, choicesKey) && !bytes.Contains(data, usageKey) {
		return upstream.Malformed("a stream chunk without choices", "")
	}
	if c.us >= 0 && data[c.us] == '{' {
		*u, _ = wire.ParseUsage(data[c.us:c.ue])
		if pl.inject && c.cs >= 0 && string(data[c.cs:c.ce]) == "[]" {
			ev.Kind = passthrough.Drop
		}
	}
	fin := hasFinish(data)
	pl.finished = pl.finished || fin
	if ev.Kind == passthrough.Drop {
		return nil
	}
	if c.ms >= 0 {
		ev.ModelStart, ev.ModelEnd = c.ms, c.me
	}
	switch {
	case !ev.Started && prelude(data):
		ev.Kind = passthrough.Prelude
	case c.cs >= 0 && !fin && !empty(data[c.cs:c.ce]):
		// A chunk of choices that is neither the prelude nor the finish: a token's delta.
		ev.Delta = true
		if !c.maybeErr && (c.us < 0 || data[c.us] != '{') {
			pl.last.learn(ev.Raw, data, c)
		}
	}
	return nil
}

// template is a content chunk's event cut around its text, which Match takes the next chunks
// for: an event whose bytes are head, a JSON string and tail is what Event passes as content,
// as it passed the chunk template was learned from — with the same model to rename, at the
// same place in head or tail — whatever the string. The string is a value inside the chunk's
// choices, so replacing it leaves every top-level member, the only part Event reads beyond
// the chunk's validity, as it was: the same keys (no error, no usage to read), model and
// object; and the chunk a JSON object (what a string value is replaced with is a string). A
// finish_reason with a string value is searched for in the bytes (hasFinish), but no match of
// it can involve the string's inside, where a quote is escaped: it was not found in the
// template's chunk, and is not in the next. And once a content chunk has passed the stream
// has started, so no later chunk is prelude.
type template struct {
	b      []byte // head, then tail
	hn     int    // head's length; 0: nothing learned
	ms, me int    // the model value, in head or, when inTail, in tail; ms == me: none
	inTail bool
}

// The keys of a delta's text: content, reasoning_content and a tool call's arguments. Each is
// searched for without its opening quote, as in hasFinish: the closing quote, which follows
// a letter and so is not escaped, ends a key when a colon follows (a quote after a letter
// cannot open a string in valid JSON), and the value after that colon is a member's.
var textKeys = [...][]byte{[]byte(`content"`), []byte(`arguments"`)}

// learn makes the chunk raw (Event's) the template when it is one data: line that ends with a
// blank line (LF or CRLF line ends) and its choices hold a text string (textKeys); else the
// template stays as it was, still sound.
func (t *template) learn(raw, data []byte, c *chunk) {
	off := dataLine(raw, data)
	if off < 0 {
		return
	}
	vs, ve := textAt(data, c.cs, c.ce)
	if vs < 0 {
		return
	}
	hs, ts := off+vs, off+ve // where the text starts and ends in raw
	ms, me, inTail := 0, 0, false
	switch {
	case c.ms < 0:
	case off+c.me <= hs:
		ms, me = off+c.ms, off+c.me
	case off+c.ms >= ts:
		ms, me, inTail = off+c.ms-ts, off+c.me-ts, true
	default:
		return // not reached: the model is top-level, the text inside choices
	}
	if n := hs + len(raw) - ts; cap(t.b) < n {
		t.b = make([]byte, 0, n)
	}
	t.b = append(append(t.b[:0], raw[:hs]...), raw[ts:]...)
	t.hn, t.ms, t.me, t.inTail = hs, ms, me, inTail
}

var (
	dataSpace = []byte("data: ")
	dataColon = []byte("data:")
)

// dataLine returns where data starts in the event raw when raw is data's one data: line and a
// blank line, with LF or CRLF line ends; else -1 (the slow path reads the rest).
func dataLine(raw, data []byte) int {
	off := 0
	switch {
	case bytes.HasPrefix(raw, dataSpace) && bytes.HasPrefix(raw[6:], data):
		off = 6
	case bytes.HasPrefix(raw, dataColon) && bytes.HasPrefix(raw[5:], data):
		off = 5
	default:
		return -1
	}
	switch string(raw[off+len(data):]) {
	case "\n\n", "\r\n\r\n":
		return off
	}
	return -1
}

// textAt returns where the first string value of a text key (textKeys, in their order) lies
// in data[cs:ce], a chunk's choices, or -1, -1. data is valid JSON.
func textAt(data []byte, cs, ce int) (int, int) {
	v := data[cs:ce]
	for _, k := range textKeys {
		for i := 0; ; {
			j := bytes.Index(v[i:], k)
			if j < 0 {
				break
			}
			i += j + len(k)
			p := skipSpace(v, i)
			if p < len(v) && v[p] == ':' {
				p = skipSpace(v, p+1)
				if e := jsontext.ValidStringAt(v, p); e > 0 {
					return cs + p, cs + e
				}
			}
		}
	}
	return -1, -1
}

// skipSpace returns the index of the first byte at or after i in b that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Match implements passthrough.Shortcut: a chunk whose bytes are the last content chunk's
// (template) but for its text, a valid JSON string (UTF-8 included).
func (pl *chatPolicy) Match(buf []byte) passthrough.Matched {
	t := &pl.last
	head, tail := t.b[:t.hn], t.b[t.hn:]
	if len(head) == 0 || !bytes.HasPrefix(buf, head) {
		return passthrough.Matched{}
	}
	e := jsontext.ValidStringAt(buf, len(head))
	if e < 0 || !bytes.HasPrefix(buf[e:], tail) {
		return passthrough.Matched{}
	}
	m := passthrough.Matched{N: e + len(tail), Delta: true}
	if t.me > t.ms {
		m.ModelStart, m.ModelEnd = t.ms, t.me
		if t.inTail {
			m.ModelStart, m.ModelEnd = e+t.ms, e+t.me
		}
	}
	return m
}

// End implements passthrough.Policy: a stream may end without [DONE], not without a
// finish_reason nor in the middle of an event.
func (pl *chatPolicy) End(partial []byte) error {
	if len(bytes.TrimSpace(partial)) > 0 || !pl.finished {
		return errTruncated()
	}
	return nil
}

// Answer implements passthrough.Policy: one scan of the top level finds the model, the usage,
// the choices and an error.
func (*chatPolicy) Answer(body []byte, u *llm.Usage) (passthrough.Answer, error) {
	f := scanAnswer(body)
	if !f.valid {
		return passthrough.Answer{}, nil // Forward refuses it
	}
	if f.isErr {
		if ae := wire.StreamError(body); ae != nil {
			return passthrough.Answer{Checked: true}, ae
		}
	}
	a := f.answer()
	// A 200 that is no completion ({}, an object without choices) or one that never says why
	// it ended (cut short) is the engine's failure, not an answer.
	switch {
	case f.cs < 0 || body[f.cs] != '[' || empty(body[f.cs:f.ce]):
		a.Invalid = "an answer without choices"
	case !hasFinish(body[f.cs:f.ce]):
		a.Invalid = "an answer without a finish_reason"
	case f.us >= 0:
		*u, _ = wire.ParseUsage(body[f.us:f.ue])
	}
	return a, nil
}

// answer is the passthrough.Answer of the fields: the model to rename, and whether the scan
// checked the body.
func (f *answerFields) answer() passthrough.Answer {
	if f.ms < 0 {
		return passthrough.Answer{Checked: f.valid}
	}
	return passthrough.Answer{ModelStart: f.ms, ModelEnd: f.me, Checked: f.valid}
}

// answerFields are the places of a non-streamed answer's top-level fields, -1 where absent,
// whether it is an error object, and for a whole answer (scanAnswer) whether it is one
// complete JSON object.
type answerFields struct {
	ms, me int // model
	us, ue int // usage
	cs, ce int // choices
	isErr  bool
	valid  bool
}

// noFields are the fields of an answer before its scan: none found.
var noFields = answerFields{ms: -1, me: -1, us: -1, ue: -1, cs: -1, ce: -1}

// note notes the member k at [vs, ve) when it is the model, the usage or the choices, reporting
// whether it was.
func (f *answerFields) note(k []byte, esc bool, vs, ve int) bool {
	switch {
	case jsontext.KeyIs(k, esc, "model"):
		f.ms, f.me = vs, ve
	case jsontext.KeyIs(k, esc, "usage"):
		f.us, f.ue = vs, ve
	case jsontext.KeyIs(k, esc, "choices"):
		f.cs, f.ce = vs, ve
	default:
		return false
	}
	return true
}

// scanAnswer finds, in one scan of a non-streamed answer's top level, its model, usage and
// choices, and whether it holds an error. The same pass checks the whole body as
// jsontext.ValidObject does (valid); when it is not valid the other fields say nothing.
func scanAnswer(body []byte) answerFields {
	f := noFields
	f.valid = jsontext.ValidObjectMembers(body, func(k []byte, esc bool, vs, ve int) {
		switch {
		case f.note(k, esc, vs, ve):
		case jsontext.KeyIs(k, esc, "error"):
			f.isErr = f.isErr || !empty(body[vs:ve])
		case jsontext.KeyIs(k, esc, "object"):
			f.isErr = f.isErr || string(body[vs:ve]) == `"error"`
		}
	})
	return f
}

// hasFinish reports whether a chunk holds a finish_reason that is a string (not null), whatever
// the engine's spacing; a search, not a scan, as for most chunks there is none. The keys it and
// the choices check search for lack their opening quote: bytes.Index looks for a needle's first
// byte first, and '"' is the most frequent byte of a chunk (with it hasFinish took 20% of
// BenchmarkPassThrough/forward, 6% without; a quote cannot end a key's name inside a JSON
// string, where it is escaped).
func hasFinish(data []byte) bool {
	for {
		i := bytes.Index(data, finishKey)
		if i < 0 {
			return false
		}
		data = data[i+len(finishKey):]
		j := 0
		for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r') {
			j++
		}
		if j < len(data) && data[j] == ':' {
			for j++; j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r'); j++ {
			}
			if j < len(data) && data[j] == '"' {
				return true
			}
		}
	}
}

// errTruncated is the error for a stream that ended (or said [DONE]) before a finish_reason;
// a new one each time, as callers may set its fields.
func errTruncated() error {
	return apierr.Wrap(apierr.BadGateway, wire.ErrTruncated, "engine stream ended before the response was complete")
}

// prelude reports whether a chunk carries nothing for the client yet: it has choices, each
// with a delta that holds at most a role and empty values (content "" or null, tool_calls [] or
// null), and none with a finish_reason; and it has no usage. Anything else — or anything it
// cannot read — is content, which is never held.
func prelude(data []byte) bool {
	var cs, ce int
	choices, usage := false, false
	if jsontext.Scan(data, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "choices"):
			choices, cs, ce = true, vs, ve
		case jsontext.KeyIs(k, esc, "usage"):
			usage = !empty(data[vs:ve])
		}
	}) != nil || !choices || usage || data[cs] != '[' {
		return false
	}
	n := 0
	ok := true
	err := jsontext.ScanArray(data[cs:ce], func(s, e int) {
		n++
		if !emptyChoice(data[cs+s : cs+e]) {
			ok = false
		}
	})
	return err == nil && n > 0 && ok
}

// emptyChoice reports whether one choice of a chunk is a delta without content or finish.
func emptyChoice(c []byte) bool {
	delta, ok := false, true
	err := jsontext.Scan(c, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "delta"):
			delta = true
			d := c[vs:ve]
			if d[0] != '{' || jsontext.Scan(d, func(k []byte, esc bool, s, e int) {
				if !jsontext.KeyIs(k, esc, "role") && !empty(d[s:e]) {
					ok = false
				}
			}) != nil {
				ok = false
			}
		case jsontext.KeyIs(k, esc, "finish_reason"):
			if !empty(c[vs:ve]) {
				ok = false
			}
		}
	})
	return err == nil && delta && ok
}

// empty reports whether a JSON value is null, "", [] or {}.
func empty(v []byte) bool {
	switch string(v) {
	case "null", `""`, "[]", "{}":
		return true
	}
	if len(v) >= 2 && (v[0] == '[' || v[0] == '{') {
		return len(bytes.TrimSpace(v[1:len(v)-1])) == 0
	}
	return false
}
