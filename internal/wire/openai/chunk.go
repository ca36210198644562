package openai

import (
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// This file reads the chunks of an engine's stream for ReadStream in one pass with
// jsontext.Scanner, without encoding/json: a stream is mostly chunks of one token each, and
// decoding each by reflection cost about fifteen allocations. The scanner reads the chunk's
// bytes in place; the strings an event keeps (text, tool call pieces, the stop sequence, the
// first chunk's id and model) are copied, nothing else is allocated.
//
// It reads what chunkJSON reads, as encoding/json would, and gives up (ok false) on anything
// whose meaning it does not take on itself: JSON the scanner refuses (which includes strings
// that are not UTF-8, which encoding/json lets through as U+FFFD), a member of a known name given
// twice in one object (encoding/json merges them), a name that could match a known one only
// ignoring case (encoding/json accepts those), a value of the wrong type, a number an int cannot
// hold exactly, and any error shape. ReadStream then decodes the chunk with encoding/json as
// before, so that every chunk, odd or not, has the meaning it always had, error messages
// included.

// chunkView is one chunk as scanChunk reads it. Its slices are reused from chunk to chunk.
type chunkView struct {
	id, model string
	choices   []choiceView
	calls     []callView // the tool calls of all the choices' deltas
	hasUsage  bool       // usage was an object
	usage     usageView
}

// choiceView is one element of choices.
type choiceView struct {
	index          int
	delta, message deltaView
	finish         string // finish_reason, "" when null
	stopSeq        string // vLLM's stop_reason when it is a string
}

// deltaView is a choice's delta or message.
type deltaView struct {
	present                bool // an object, not null or absent
	hasContent, hasRefusal bool // a string, not null or absent
	content, refusal       string
	calls0, calls1         int    // its tool calls: chunkView.calls[calls0:calls1]
	contentAt              [2]int // where the inside of the content string lies in the chunk
}

// callView is one element of a delta's tool_calls.
type callView struct {
	index          int
	hasIndex       bool
	id, name, args string
}

// usageView is a usage object's counts; cached is prompt_tokens_details.cached_tokens.
type usageView struct{ prompt, completion, cached int }

// chunkScanner reads one chunk into a chunkView.
type chunkScanner struct {
	d     jsontext.Scanner
	v     *chunkView
	keepH bool   // keep (copy) the id and model: no message has started yet
	seen  uint32 // the known members met in the object being read (see once)
}

// chunkPrefix is the head of the last chunk scanChunk read whole: its bytes up to the end of
// the last member before the first "choices" or "usage", and what reading them left behind.
// The chunks of a stream from vLLM, SGLang, TGI or the hosted API begin with the same id,
// object, created and model: a chunk that begins with the same bytes is read from there on, the
// scanner's state after a prefix depending only on the prefix's bytes. Once the message has
// started those members change nothing (the id and model were taken from the first chunk). A
// chunk whose head merely begins the same way (a longer number, say) fails to read from there,
// and is read whole.
type chunkPrefix struct {
	b    []byte
	n    int    // the members in b
	seen uint32 // the known ones among them
}

// headMark is where the head of a chunk ends, noted while it is read whole.
type headMark struct {
	end, n int
	seen   uint32
	done   bool
}

// textTemplate is the last chunk read whose only effect, once the message has started, was a
// text delta: a single choice of index 0 whose delta has content and nothing else that counts
// (no refusal, tool calls, finish_reason; no usage). Most chunks of a stream are such, the same
// bytes around a different text: a chunk of the template's bytes around a text that needs no
// unescaping is a text delta of that text, with nothing left to read. It is sound for the same
// reason as chunkPrefix: the text ends at the first quote, and what follows it is read from the
// same state as in the template, to the same end.
type textTemplate struct {
	b          []byte // the chunk
	start, end int    // the inside of its content string, b[start:end]
}

// match returns the text of a chunk that fits the template.
func (t *textTemplate) match(data []byte) ([]byte, bool) {
	tail := len(t.b) - t.end
	if len(t.b) == 0 || len(data) < t.start+tail || string(data[:t.start]) != string(t.b[:t.start]) ||
		string(data[len(data)-tail:]) != string(t.b[t.end:]) {
		return nil, false
	}
	text := data[t.start : len(data)-tail]
	ascii := true
	for _, c := range text {
		if c == '"' || c == '\\' || c < 0x20 {
			return nil, false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return text, ascii || utf8.Valid(text)
}

// record makes data the template if v, the chunk read from it, is a text delta alone.
func (t *textTemplate) record(data []byte, v *chunkView) {
	if len(v.choices) != 1 || v.hasUsage || len(data) > maxMemo {
		return
	}
	ch := &v.choices[0]
	d := &ch.delta
	if ch.index != 0 || ch.finish != "" || !d.present || !d.hasContent || d.hasRefusal || d.calls0 != d.calls1 {
		return
	}
	t.b, t.start, t.end = append(t.b[:0], data...), d.contentAt[0], d.contentAt[1]
}

// maxMemo bounds the bytes a template or a head keeps: a token's chunk is a few hundred bytes,
// and a larger one, rare, is not worth keeping a copy of for the rest of the stream.
const maxMemo = 4 << 10

// chunkMemo is what scanChunk remembers of a stream's last chunks.
type chunkMemo struct {
	head chunkPrefix
	text textTemplate
	strs llm.Arena // the text of the chunks that fit the template
}

// scanChunk reads data into v, reporting false when encoding/json must decode it instead (see
// the top of this file). It reads data in place: the strings it keeps are copies, so data may
// be overwritten as soon as it returns. keepHead keeps the id and model, and reads the chunk
// whole; otherwise a chunk that fits the last text delta's template (m.text) is not read at all,
// and the head a chunk shares with the last one (m.head) is not read again.
func scanChunk(data []byte, v *chunkView, keepHead bool, m *chunkMemo) bool {
	v.reset()
	if !keepHead {
		if text, ok := m.text.match(data); ok {
			v.choices = append(v.choices, choiceView{delta: deltaView{present: true, hasContent: true, content: m.strs.String(text)}})
			return true
		}
	}
	if !scanWhole(data, v, keepHead, &m.head) {
		return false
	}
	m.text.record(data, v)
	return true
}

// scanWhole is scanChunk without the template.
func scanWhole(data []byte, v *chunkView, keepHead bool, p *chunkPrefix) bool {
	s := chunkScanner{d: jsontext.Scanner{Text: unsafe.String(unsafe.SliceData(data), len(data))}, v: v, keepH: keepHead}
	if !keepHead && len(p.b) > 0 && len(data) > len(p.b) && string(data[:len(p.b)]) == string(p.b) {
		s.d.Pos = len(p.b)
		if s.members(p.n, p.seen, nil) && s.d.End() == nil {
			return true
		}
		v.reset()
		s.d.Pos = 0
	}
	var head headMark
	if s.d.Peek() != jsontext.KindObject {
		return false
	}
	s.d.Pos++
	if !s.members(0, 0, &head) || s.d.End() != nil {
		return false
	}
	p.b = p.b[:0]
	if head.done && head.n > 0 && head.end <= maxMemo {
		p.b, p.n, p.seen = append(p.b, data[:head.end]...), head.n, head.seen
	}
	return true
}

// reset empties v for the next chunk, keeping its slices' memory.
func (v *chunkView) reset() {
	v.id, v.model = "", ""
	v.choices, v.calls = v.choices[:0], v.calls[:0]
	v.hasUsage, v.usage = false, usageView{}
}

// Bits of the known members met in one object, to refuse a name given twice.
const (
	mID = 1 << iota
	mModel
	mObject
	mMessage
	mCode
	mError
	mChoices
	mUsage
)

// once marks bit among the known members met in the object being read (s.seen), reporting false
// when it was already there.
func (s *chunkScanner) once(bit uint32) bool {
	if s.seen&bit != 0 {
		return false
	}
	s.seen |= bit
	return true
}

// knownNames are the member names chunkJSON reads, at any depth.
var knownNames = [...]string{"id", "model", "object", "message", "code", "error", "choices", "usage",
	"index", "delta", "finish_reason", "stop_reason", "content", "refusal", "tool_calls", "type",
	"function", "name", "arguments", "prompt_tokens", "completion_tokens", "prompt_tokens_details",
	"cached_tokens"}

// unknown skips the value of a member no field is named after, reporting false when the value
// is not valid JSON or when the name could match a field's ignoring case, as encoding/json
// matches them: a name with upper-case letters that equals a known one in lower case, or any
// name with a byte beyond ASCII (encoding/json folds some such letters, the Kelvin sign and the
// long s among them, to ASCII ones).
func (s *chunkScanner) unknown(k string, depth int) bool {
	upper := false
	for i := 0; i < len(k); i++ {
		if c := k[i]; c >= 0x80 {
			return false
		} else if c >= 'A' && c <= 'Z' {
			upper = true
		}
	}
	if upper {
		for _, name := range knownNames {
			if strings.EqualFold(k, name) {
				return false
			}
		}
	}
	return s.d.Skip(depth) == nil
}

// members reads the members of the chunk object from the position on, n of them read already,
// the known ones among them in seen. With head, it notes where the head ends (see chunkPrefix).
func (s *chunkScanner) members(n int, seen uint32, head *headMark) bool {
	d := &s.d
	last := 0 // where the last member's value ended
	s.seen = seen
	for {
		k, ok, err := d.NextKey(&n)
		if err != nil {
			return false
		}
		if !ok {
			return true
		}
		switch k {
		case "id":
			ok = s.once(mID) && s.str(&s.v.id, s.keepH)
		case "model":
			ok = s.once(mModel) && s.str(&s.v.model, s.keepH)
		case "object":
			var obj string
			ok = s.once(mObject) && s.str(&obj, false) && obj != "error"
		case "message":
			var msg string
			ok = s.once(mMessage) && s.str(&msg, false)
		case "code":
			ok = s.once(mCode) && d.Skip(1) == nil
		case "error": // null only: an error is decoded as before
			ok = s.once(mError) && d.Peek() == jsontext.KindNull && s.null()
		case "choices", "usage":
			if head != nil && !head.done {
				*head = headMark{end: last, n: n - 1, seen: s.seen, done: true}
			}
			if k == "choices" {
				ok = s.once(mChoices) && s.choices()
			} else {
				ok = s.once(mUsage) && s.usage()
			}
		default:
			ok = s.unknown(k, 1)
		}
		if !ok {
			return false
		}
		last = d.Pos
	}
}

// fields reads the members of an object whose '{' was consumed: member reads the value of each,
// given its name. It reports false when member does or the object is not valid JSON. Each kind
// of object is then only its switch on the names it knows. While the object is read, the known
// names met in it are in s.seen (a pointer to a variable of fields given to member would move it
// to the heap); an inner object's, read by member, gives way to the outer one's when the inner
// one ends. After false nothing more is read.
func (s *chunkScanner) fields(member func(k string) bool) bool {
	outer := s.seen
	s.seen = 0
	for n := 0; ; {
		k, ok, err := s.d.NextKey(&n)
		if err != nil {
			return false
		}
		if !ok {
			s.seen = outer
			return true
		}
		if !member(k) {
			return false
		}
	}
}

// object reads an object or null at the position, the members of an object as fields does,
// setting *present (when not nil) for an object; null is consumed and leaves *present alone, as
// encoding/json leaves a field for it; anything else gives up.
func (s *chunkScanner) object(present *bool, member func(k string) bool) bool {
	switch s.d.Peek() {
	case jsontext.KindNull:
		return s.null()
	case jsontext.KindObject:
		s.d.Pos++
		if present != nil {
			*present = true
		}
		return s.fields(member)
	}
	return false
}

// null consumes null at the position.
func (s *chunkScanner) null() bool {
	lit, err := s.d.Literal()
	return err == nil && lit == "null"
}

// str reads a string into *dst, a copy of it with keep; null leaves *dst alone, as
// encoding/json does; any other value gives up.
func (s *chunkScanner) str(dst *string, keep bool) bool {
	d := &s.d
	switch d.Peek() {
	case jsontext.KindString:
		start := d.Pos
		v, err := d.Str()
		if err != nil {
			return false
		}
		// Without escapes the value is the span between the quotes, a view of the chunk's
		// bytes; with them it is already a string of its own.
		if keep && len(v) == d.Pos-start-2 {
			v = strings.Clone(v)
		}
		*dst = v
		return true
	case jsontext.KindNull:
		return s.null()
	}
	return false
}

// optStr reads a string or null into *dst, setting *set for a string.
func (s *chunkScanner) optStr(dst *string, set *bool, keep bool) bool {
	if s.d.Peek() == jsontext.KindNull {
		return s.null()
	}
	*set = true
	return s.str(dst, keep)
}

// int reads an integer into *dst (null leaves it alone). Numbers encoding/json refuses for an
// int (a fraction, an exponent, beyond an int) give up.
func (s *chunkScanner) int(dst *int, set *bool) bool {
	d := &s.d
	switch d.Peek() {
	case jsontext.KindNumber:
		lit, err := d.Number()
		if err != nil {
			return false
		}
		n, ok := parseInt(lit)
		if !ok {
			return false // a fraction, an exponent, beyond an int: left to encoding/json
		}
		*dst = n
		if set != nil {
			*set = true
		}
		return true
	case jsontext.KindNull:
		return s.null()
	}
	return false
}

// array reads an array or null, calling elem at each element's position.
func (s *chunkScanner) array(elem func() bool) bool {
	d := &s.d
	switch d.Peek() {
	case jsontext.KindNull:
		return s.null()
	case jsontext.KindArray:
	default:
		return false
	}
	d.Pos++
	for n := 0; ; {
		ok, err := d.NextElem(&n)
		if err != nil {
			return false
		}
		if !ok {
			return true
		}
		if !elem() {
			return false
		}
	}
}

func (s *chunkScanner) choices() bool {
	return s.array(func() bool {
		s.v.choices = append(s.v.choices, choiceView{})
		ch := &s.v.choices[len(s.v.choices)-1]
		// null: a choice with nothing in it, as encoding/json leaves one. ch may move when a
		// delta's tool calls grow s.v.calls, not s.v.choices.
		return s.object(nil, func(k string) bool {
			switch k {
			case "index":
				return s.once(1) && s.int(&ch.index, nil)
			case "delta":
				return s.once(2) && s.delta(&ch.delta)
			case "message":
				return s.once(4) && s.delta(&ch.message)
			case "finish_reason":
				return s.once(8) && s.str(&ch.finish, false)
			case "stop_reason": // the matched stop string, or a token id, or null
				if !s.once(16) {
					return false
				}
				if s.d.Peek() == jsontext.KindString {
					return s.str(&ch.stopSeq, true)
				}
				return s.d.Skip(3) == nil
			}
			return s.unknown(k, 3)
		})
	})
}

func (s *chunkScanner) delta(dv *deltaView) bool {
	return s.object(&dv.present, func(k string) (ok bool) {
		switch k {
		case "content":
			s.d.WS()
			at := s.d.Pos
			ok = s.once(1) && s.optStr(&dv.content, &dv.hasContent, true)
			dv.contentAt = [2]int{at + 1, s.d.Pos - 1}
			return ok
		case "refusal":
			return s.once(2) && s.optStr(&dv.refusal, &dv.hasRefusal, true)
		case "tool_calls":
			dv.calls0 = len(s.v.calls)
			ok = s.once(4) && s.array(func() bool {
				s.v.calls = append(s.v.calls, callView{})
				return s.call(len(s.v.calls) - 1)
			})
			dv.calls1 = len(s.v.calls)
			return ok
		}
		return s.unknown(k, 4)
	})
}

// call reads the tool call s.v.calls[i]; null is a tool call with nothing in it, as
// encoding/json leaves one.
func (s *chunkScanner) call(i int) bool {
	c := &s.v.calls[i]
	return s.object(nil, func(k string) bool {
		switch k {
		case "index":
			return s.once(1) && s.int(&c.index, &c.hasIndex) // null: no index, as a nil *int
		case "id":
			return s.once(2) && s.str(&c.id, true)
		case "type":
			var typ string
			return s.once(4) && s.str(&typ, false)
		case "function":
			return s.once(8) && s.function(c)
		}
		return s.unknown(k, 6)
	})
}

func (s *chunkScanner) function(c *callView) bool {
	return s.object(nil, func(k string) bool {
		switch k {
		case "name":
			return s.once(1) && s.str(&c.name, true)
		case "arguments":
			return s.once(2) && s.str(&c.args, true)
		}
		return s.unknown(k, 7)
	})
}

// usage reads the usage object; null is no usage, as a nil *usageJSON.
func (s *chunkScanner) usage() bool {
	u := &s.v.usage
	return s.object(&s.v.hasUsage, func(k string) bool {
		switch k {
		case "prompt_tokens":
			return s.once(1) && s.int(&u.prompt, nil)
		case "completion_tokens":
			return s.once(2) && s.int(&u.completion, nil)
		case "prompt_tokens_details":
			return s.once(4) && s.details(u)
		}
		return s.unknown(k, 2)
	})
}

func (s *chunkScanner) details(u *usageView) bool {
	return s.object(nil, func(k string) bool {
		if k == "cached_tokens" {
			return s.once(1) && s.int(&u.cached, nil)
		}
		return s.unknown(k, 3)
	})
}
