package pipeline

import (
	"time"

	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
)

// maxHeld bounds the prelude events held before the first content; an engine that sends more
// structure than that before any content has its prelude released (and the attempt committed).
const maxHeld = engine.MaxHeldEvents

// attemptSink sits between an engine and the client's sink for one call. It knows precisely
// whether anything of the current attempt has reached the client's encoder (committed): the
// prelude is held until the first content delta (or the stop), so an attempt that fails before
// it leaves no trace and the next attempt's stream is the only one the client sees. It also
// times the engine, notes the first token, stops the first-byte timer, and charges output
// tokens to the rate limits as they stream (one per content delta, on each Flush; the engine's
// count settles them at the end).
type attemptSink struct {
	inner llm.Sink
	sim   Simulator      // the attempt's engine, when it can say it is a simulator
	col   *llm.Collector // inner, when it collects the whole answer before anything is sent
	rec   *Record
	lease *limit.Lease
	timer *time.Timer
	start llm.Event // a start event completed with input, without allocating

	// The request's input tokens as estimated by the tokenizer, once counted (estimate counts
	// them on first use when Serve did not need to).
	input   int
	counted bool
	p       *Pipeline
	call    *Call
	name    string

	held      [maxHeld]llm.Event
	nheld     int
	committed bool // the attempt's events have reached inner: no retry after this
	first     bool // a content delta arrived in this attempt
	stopped   bool // EventStop arrived
	pending   int  // content deltas not yet charged
	t0        time.Time
	inSink    time.Duration // time inside inner's Flush and final Send, in this attempt
	tee       *teeSink      // the recorder of an answer to be stored, when inner is it
	// clientErr is the attempt's first failure to write to the client, marked with
	// engine.ErrClientWrite.
	clientErr error
}

func (s *attemptSink) init(p *Pipeline, c *Call, name string, lease *limit.Lease, input int, counted bool) {
	s.inner, s.rec, s.lease = c.Sink, &c.Record, lease
	s.input, s.counted, s.p, s.call, s.name = input, counted, p, c, name
	s.col, _ = c.Sink.(*llm.Collector)
	c.cache.tap(s)
}

// estimate returns the request's input tokens as the tokenizer counts them, counting them now
// if Serve did not (0 when the count fails: it is only an estimate).
func (s *attemptSink) estimate() int {
	if !s.counted {
		s.counted = true
		s.input, _ = s.p.count(s.name, s.call.request())
	}
	return s.input
}

// noteSimulated sets the record's Simulated from the attempt's engine: a simulator, or an engine
// whose answers say they come from one (another layer0 serving its sim).
func (s *attemptSink) noteSimulated() {
	s.rec.Simulated = s.sim != nil && s.sim.Simulated()
}

// begin starts an attempt.
func (s *attemptSink) begin(t0 time.Time) {
	s.t0, s.inSink = t0, 0
	s.nheld, s.first, s.stopped, s.pending = 0, false, false, 0
	s.clientErr = nil
	s.rec.Deltas = 0
}

// cutUsage completes the usage of an attempt that ended in error after content reached the
// client (the engine failed, or the client hung up), which is what the request is billed for:
// the prompt as the engine counted it when it said (an Anthropic engine's message_start, the
// sim's start; the stop's usage, when the stop came), else as the tokenizer counts it; and the
// output the engine reported, or one token per content delta sent when that is more (the engine
// had not sent its count: message_start's output_tokens is 1, an OpenAI-compatible engine's
// usage comes with the last chunk).
func (s *attemptSink) cutUsage() {
	u := &s.rec.Usage
	if u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens == 0 {
		u.InputTokens = s.estimate()
	}
	u.OutputTokens = max(u.OutputTokens, s.rec.Deltas)
}

// discard drops a failed attempt's traces: its held prelude, or what a collector gathered.
func (s *attemptSink) discard() {
	s.nheld = 0
	s.pending = 0
	s.rec.Usage = llm.Usage{}
	s.rec.ResponseID, s.rec.ResponseModel, s.rec.Stop, s.rec.Stopped = "", "", 0, false
	if s.col != nil {
		*s.col = llm.Collector{}
	}
	if s.tee != nil {
		s.tee.rec.Reset()
	}
}

// Send implements llm.Sink.
func (s *attemptSink) Send(ev *llm.Event) error {
	switch ev.Kind {
	case llm.EventTextDelta, llm.EventToolDelta:
		if ev.Text == "" {
			return nil
		}
		s.rec.Deltas++
		s.pending++
		if !s.first {
			s.first = true
			s.rec.TTFT = time.Since(s.rec.Start)
			if s.timer != nil {
				s.timer.Stop()
			}
		}
		if !s.committed && s.col == nil {
			if err := s.commit(); err != nil {
				return err
			}
		}
	case llm.EventStop:
		s.stopped = true
		s.rec.Usage = ev.Usage
		s.rec.Stop, s.rec.Stopped = ev.Stop, true
		if s.timer != nil {
			s.timer.Stop()
		}
		if !s.committed && s.col == nil {
			if err := s.commit(); err != nil {
				return err
			}
		}
		t := time.Now()
		err := s.inner.Send(ev) // the end of the message is written and flushed at once
		s.inSink += time.Since(t)
		return s.client(err)
	default:
		if ev.Kind == llm.EventStart {
			s.rec.ResponseID, s.rec.ResponseModel = ev.ID, ev.Model
			// The prompt as the engine counted it (input, cache reads and writes), which a
			// stream cut before the stop is billed for; the output is the stop's to say.
			s.rec.Usage = ev.Usage
			s.rec.Usage.OutputTokens = 0
		}
		if ev.Kind == llm.EventStart && ev.Usage.InputTokens == 0 && ev.Usage.CacheReadInputTokens == 0 && s.estimate() > 0 {
			// Engines that count input only at the end (OpenAI-compatible streams) start with 0;
			// clients read message_start's input_tokens, so it carries the tokenizer's estimate
			// until the engine's own count arrives with the stop.
			s.start = *ev
			s.start.Usage.InputTokens = s.estimate()
			ev = &s.start
		}
		if !s.committed && s.col == nil {
			if s.nheld < maxHeld {
				s.held[s.nheld] = *ev
				s.nheld++
				return nil
			}
			if err := s.commit(); err != nil {
				return err
			}
		}
	}
	return s.client(s.inner.Send(ev))
}

// client notes err, a failure of the client's sink or writer, as the client's (nil stays nil).
func (s *attemptSink) client(err error) error {
	if err == nil {
		return nil
	}
	err = engine.ClientWrite(err)
	if s.clientErr == nil {
		s.clientErr = err
	}
	return err
}

// commit releases the held prelude to the client's sink: from here on the attempt's failures
// end the stream instead of moving the request on.
func (s *attemptSink) commit() error {
	s.committed = true
	s.noteSimulated() // before the response's headers go out
	s.rec.FirstEventEngine = s.rec.EngineTime + time.Since(s.t0) - s.inSink
	for i := range s.held[:s.nheld] {
		if err := s.inner.Send(&s.held[i]); err != nil {
			return s.client(err)
		}
		s.held[i] = llm.Event{}
	}
	s.nheld = 0
	return nil
}

// Flush implements llm.Sink. Before the attempt commits there is nothing of it to push.
func (s *attemptSink) Flush() error {
	if s.pending > 0 {
		_ = s.lease.Charge(s.pending) // a store failure leaves the count to the settlement
		s.pending = 0
	}
	if !s.committed && s.col == nil {
		return nil
	}
	t := time.Now()
	err := s.inner.Flush()
	s.inSink += time.Since(t)
	return s.client(err)
}

// countingWriter is the pass-through path's writer: the first byte written commits the attempt.
// The engines hold a stream's prelude back until its first content (passthrough.Out in the HTTP engines), so, as with
// attemptSink, an attempt that fails before content writes nothing and can still fall back.
type countingWriter struct {
	w   passthrough.Writer
	att *attemptSink
	n   int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.n == 0 && len(b) > 0 {
		w.att.committed = true
		w.att.noteSimulated()
		w.att.rec.TTFT = time.Since(w.att.rec.Start)
		w.att.rec.FirstEventEngine = w.att.rec.EngineTime + time.Since(w.att.t0)
		if w.att.timer != nil {
			w.att.timer.Stop()
		}
	}
	n, err := w.w.Write(b)
	w.n += int64(n)
	return n, w.att.client(err)
}

// Flush passes a flush on to the client's writer, which the engines' pass-through calls after
// each batch of events.
func (w *countingWriter) Flush() error { return w.att.client(w.w.Flush()) }
