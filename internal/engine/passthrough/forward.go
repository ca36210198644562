package passthrough

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// MaxJSONBody bounds a non-streamed answer Forward reads.
const MaxJSONBody = 64 << 20

// Kind is what Forward does with a stream's event, as its Policy says.
type Kind uint8

const (
	// Content is written to the client (after the held prelude): the attempt commits.
	Content Kind = iota
	// Prelude carries nothing for the client yet: it is held back while nothing was written
	// (Out.Hold), so that a failure before content leaves the client untouched.
	Prelude
	// Drop is not written (a chunk layer0 asked for on its own account, as usage).
	Drop
	// Last is written and ends the stream: Forward returns, the caller ends the response.
	Last
)

// Event is one event of the engine's stream as Forward hands it to its Policy: the event as
// sse.Reader.Next returns it, and what the policy says of it.
type Event struct {
	// Raw is every byte of the event, Name its event: field, Data its data: payload; valid
	// until Event returns.
	Raw, Name, Data []byte
	// Started says something already reached (or is on its way to) the client: an error now
	// cuts the stream, where before it the request may still fall back.
	Started bool

	// Kind is what to do with the event; the policy sets it (Content when left alone).
	Kind Kind
	// Delta, set by the policy, says the event carries generated content (a text or
	// tool-argument delta): Forward counts those it writes in Result.Deltas.
	Delta bool
	// ModelStart and ModelEnd, when ModelEnd > ModelStart, locate in Data the model value to
	// give the client's model name; ModelTop asks Forward to find the top-level "model" of
	// Data itself (Renamer.Event). Neither leaves the event as it is.
	ModelStart, ModelEnd int
	ModelTop             bool
}

// Answer is what a Policy read in a non-streamed answer.
type Answer struct {
	// ModelStart and ModelEnd locate the answer's model value, renamed as in Event.
	ModelStart, ModelEnd int
	// Invalid, when not empty, says why the body is no answer (it is then a malformed answer).
	Invalid string
	// Checked is set when Answer found the body to be one complete JSON object, UTF-8, in the
	// same pass that read it (jsontext.ValidObjectMembers), so that Forward need not check it
	// again; without it Forward checks the body itself.
	Checked bool
}

// Policy is a wire format's rules for Forward: what each event of a stream is and is checked
// for, how an error and usage look, what ends the stream. A Policy holds the state of one call
// (a stream seen to start, a finish seen) and is used by one Forward.
type Policy interface {
	// Event checks the stream's event e (not a comment: Forward passes those on itself),
	// reads the usage it carries into u and sets e.Kind and the model to rename. An error
	// (the engine's error event, a malformed event) ends the call: Forward writes what was
	// queued and returns it.
	Event(e *Event, u *llm.Usage) error
	// End is called when the stream ends without a Last event; partial is what there was of
	// an unfinished event. It returns nil when that is a complete stream, else the error.
	End(partial []byte) error
	// Answer reads a non-streamed answer, body, and its usage into u. body is not checked yet:
	// Answer either checks it as it reads it and sets Answer.Checked, or returns without
	// reading more when it is not one complete JSON object, as Forward then refuses it
	// whatever else Answer returned. Otherwise an error it returns (an error object) fails the
	// call whatever the request asked for; then a streaming request is refused a JSON answer,
	// and then Answer.Invalid is checked.
	Answer(body []byte, u *llm.Usage) (Answer, error)
}

// A Shortcut is a Policy that recognises its most frequent events from their raw bytes, so
// that Forward copies them without splitting the stream into fields and handing each to Event.
// Match reports such an event at the start of buf (Matched.N is 0 when buf does not begin with
// one, whole). An event it matches must be one Event would pass as Content — checked as Event
// checks it, no usage, no state changed — in the state the policy is in, with the same Delta
// and the same model to rename (located in the event's bytes, where Event locates it in its
// data). The anthropic policy matches a text delta in the API's own shape once the stream has
// begun; the openai one a chunk that differs from the last content chunk it checked only in
// its text.
type Shortcut interface {
	Match(buf []byte) Matched
}

// Matched is an event a Shortcut recognised at the start of a buffer.
type Matched struct {
	// N is the event's length, its blank line included; 0 when there is none.
	N int
	// Delta says the event carries generated content, as Event.Delta.
	Delta bool
	// ModelStart and ModelEnd, when ModelEnd > ModelStart, locate in the event's bytes (not
	// its data, unlike Event's) the model value to give the client's model name.
	ModelStart, ModelEnd int
}

// Source is the engine's answer as Forward reads it.
type Source struct {
	// Body is the answer's body and ContentType its Content-Type.
	Body        io.Reader
	ContentType string
	// Stream says the request asked for a stream.
	Stream bool
	// ClientModel is the model name the client sees in the answer; empty keeps the engine's.
	ClientModel string
	// Err, when not nil, gives an error met in reading the answer, or found in it, its
	// context (upstream.Response.Err: the client's timeouts, the engine's words kept from the
	// client). Errors in writing to the client are returned as they are.
	Err func(error) error
}

// state is what one Forward call reads and writes through, pooled: a call allocates nothing
// once the pool is warm.
type state struct {
	out  Out
	rn   Renamer
	er   sse.Reader
	read []byte
	ev   Event
	// res is the result being built: the policy's methods (an interface) take a pointer into
	// it, which would move a local Result to the heap on every call.
	res Result
}

var states = sync.Pool{New: func() any { return new(state) }}

// maxPooled bounds a buffer kept in the pool: one grown by a large answer is let go.
const maxPooled = 1 << 20

func (s *state) release() {
	s.er.Reset(nil)
	s.out.W = nil
	if cap(s.read) > maxPooled {
		s.read = nil
	}
	if cap(s.out.Held) > maxPooled {
		s.out.Held = nil
	}
	if cap(s.out.Queued) > maxPooled {
		s.out.Queued = nil
	}
	if cap(s.rn.buf) > maxPooled || cap(s.rn.prefix) > maxPooled {
		s.rn = Renamer{}
	}
	s.ev = Event{}
	states.Put(s)
}

// Forward copies the engine's answer src to the client's writer w under the format's policy p:
// a JSON answer whole, once it is read and checked; an event stream event by event, each read
// once, checked and renamed as p says, the prelude held back until the first content, the
// events that arrived together written together and flushed when the engine has nothing more
// ready (not after the last: the caller ends the response). An error before anything was
// written leaves w untouched (the caller may fall back); after that the caller ends the stream
// with its format's error event.
func Forward(p Policy, src *Source, w Writer) (Result, error) {
	s := states.Get().(*state)
	defer s.release()
	s.out = Out{W: w, ContentType: src.ContentType, Held: s.out.Held[:0], Queued: s.out.Queued[:0]}
	s.rn.Reset(src.ClientModel)
	s.res = Result{}
	res := &s.res
	errf := src.Err
	if errf == nil {
		errf = func(err error) error { return err }
	}
	if err := upstream.CheckContentType(src.ContentType, src.Stream); err != nil {
		return *res, errf(err)
	}
	var err error
	if !upstream.IsSSE(src.ContentType) {
		err = s.answer(p, src, res, errf)
	} else {
		res.Stream = true
		err = s.stream(p, src.Body, res, errf)
	}
	res.Bytes = s.out.N
	return *res, err
}

// answer copies a non-streamed answer.
func (s *state) answer(p Policy, src *Source, res *Result, errf func(error) error) error {
	body, err := upstream.ReadAll(s.read[:0], src.Body, MaxJSONBody)
	s.read = body
	if err != nil {
		return errf(fmt.Errorf("reading the engine's answer: %w", err))
	}
	before := res.Usage
	a, err := p.Answer(body, &res.Usage)
	// Nothing was written yet: an answer cut short, or not JSON, fails the attempt here, and
	// the caller may fall back.
	if !a.Checked && !jsontext.ValidObject(body) {
		res.Usage = before // not what Answer may have read of a broken body
		return errf(upstream.Malformed("incomplete or invalid JSON", ""))
	}
	switch {
	case err != nil:
		return errf(err) // an error object with a 200: nothing was written, the caller may fall back
	case src.Stream:
		return errf(upstream.StreamAnsweredJSON())
	case a.Invalid != "":
		return errf(upstream.Malformed(a.Invalid, ""))
	}
	ms := a.ModelStart
	if a.ModelEnd <= a.ModelStart {
		ms = -1
	}
	if err := s.rn.WriteJSON(&s.out, body, ms, a.ModelEnd); err != nil {
		return err
	}
	return s.out.Flush()
}

// stream copies an event stream: the one loop every format's pass-through runs.
func (s *state) stream(p Policy, body io.Reader, res *Result, errf func(error) error) error {
	s.er.Reset(body)
	out := &s.out
	sc, _ := p.(Shortcut)
	for {
		if sc != nil {
			if err := s.shortcut(sc, res); err != nil {
				return err
			}
		}
		raw, name, data, rerr := s.er.Next()
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if err := p.End(raw); err != nil {
					return s.fail(errf(err))
				}
				return out.Release() // the caller ends the response (Forwarder)
			}
			return s.fail(errf(readErr(rerr)))
		}
		if len(name) == 0 && len(data) == 0 {
			// A comment (a keep-alive): passed on, without committing the attempt.
			if out.Started() || !out.Hold(raw) {
				if err := out.Queue(raw); err != nil {
					return err
				}
			}
		} else {
			e := &s.ev
			*e = Event{Raw: raw, Name: name, Data: data, Started: out.Started()}
			if err := p.Event(e, &res.Usage); err != nil {
				return s.fail(errf(err))
			}
			if e.Kind != Drop {
				ev := raw
				switch {
				case e.ModelEnd > e.ModelStart:
					ev = s.rn.EventAt(raw, data, e.ModelStart, e.ModelEnd)
				case e.ModelTop:
					ev = s.rn.Event(raw, data)
				}
				if e.Kind == Last {
					if err := out.Queue(ev); err != nil {
						return err
					}
					return out.Release() // the caller ends the response (Forwarder)
				}
				if e.Kind != Prelude || out.Started() || !out.Hold(ev) {
					if err := out.Queue(ev); err != nil {
						return err
					}
				}
				if e.Delta {
					res.Deltas++
				}
			}
		}
		// What arrived together goes out together; nothing waits while the engine is silent.
		if !s.er.Buffered() {
			if err := out.Flush(); err != nil {
				return err
			}
		}
	}
}

// shortcut queues the run of events at the start of what is buffered that sc matches whole (in
// one copy, as Queue copies, but where a model is renamed), and then, as the loop does after
// every event, flushes when no whole event is left in hand.
func (s *state) shortcut(sc Shortcut, res *Result) error {
	buf := s.er.Buffer()
	n, from := 0, 0 // buf[from:n] is matched and not yet queued
	for {
		m := sc.Match(buf[n:])
		if m.N <= 0 {
			break
		}
		if m.Delta {
			res.Deltas++
		}
		if m.ModelEnd > m.ModelStart {
			if v := s.rn.Value(buf[n+m.ModelStart : n+m.ModelEnd]); v != nil {
				if err := s.out.Queue(buf[from : n+m.ModelStart]); err != nil {
					return err
				}
				if err := s.out.Queue(v); err != nil {
					return err
				}
				from = n + m.ModelEnd
			}
		}
		n += m.N
	}
	if n == 0 {
		return nil
	}
	if err := s.out.Queue(buf[from:n]); err != nil {
		return err
	}
	s.er.Discard(n)
	if !s.er.Buffered() {
		return s.out.Flush()
	}
	return nil
}

// fail writes the events queued before err, which ends the call: they reached the client's side
// before the error, as they would have unqueued. A failure to write them is the error then.
func (s *state) fail(err error) error {
	if len(s.out.Queued) > 0 {
		if _, werr := s.out.Write(nil); werr != nil {
			return werr
		}
	}
	return err
}

// readErr is the error for err, a failed read of the engine's event stream: a malformed answer
// for a stream that is not SSE or an event beyond the size limit, else err wrapped.
func readErr(err error) error {
	switch {
	case errors.Is(err, sse.ErrNotSSE):
		return upstream.Malformed("a stream that is not SSE", err.Error())
	case errors.Is(err, sse.ErrEventTooLarge):
		return upstream.Malformed("a stream event beyond the size limit", err.Error())
	}
	return fmt.Errorf("reading the engine's stream: %w", err)
}
