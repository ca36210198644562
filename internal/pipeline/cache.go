package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/llm"
)

// The request record's Cache values: what the response cache did for the request. "" is a
// request whose model does not cache.
const (
	// CacheHit is an answer replayed from the store.
	CacheHit = "hit"
	// CacheCoalesced is an answer replayed from an identical request's engine call that was in
	// flight when this one arrived (single flight).
	CacheCoalesced = "coalesced"
	// CacheMiss is a request the store had no answer for: it went to the engine, and its
	// answer is stored if complete.
	CacheMiss = "miss"
	// CacheRefresh is a request whose client asked not to be served from the cache
	// (Cache-Control: no-cache): it went to the engine, and its answer is stored.
	CacheRefresh = "refresh"
	// CacheBypass is a request the cache took no part in: the client asked for no-store, or the
	// model's policy does not cache its answer (sampled at a temperature above 0).
	CacheBypass = "bypass"
)

// cacheCall is a call's state in the cache stage.
type cacheCall struct {
	model  *cache.Model  // the model's cache; nil when the call will not be stored
	canon  *cache.Canon  // the request's encoding and key, when model is set
	flight *cache.Flight // the flight this call leads, until it is finished
	tee    teeSink       // the client's sink with the recorder beside it
	ev     llm.Event     // the event being replayed (sinks may modify what they are sent)
}

// teeSink passes events on to the client's sink and records them: the attempt sink's inner sink
// when the answer may be stored, so the recorder sees exactly what the client sees (the held
// prelude once released, the start with the tokenizer's input estimate). The attempt sink resets
// the recorder when it discards an attempt.
//
// When the call leads a flight, the tee marks each write to the client on it, so that followers
// can tell a leader held by its own client from one waiting on the engine (cache.Flight).
type teeSink struct {
	llm.Sink
	rec    cache.Recorder
	flight *cache.Flight // the flight the call leads; nil when none
}

// Send implements llm.Sink.
func (t *teeSink) Send(ev *llm.Event) error {
	_ = t.rec.Send(ev)
	t.flight.Writing()
	err := t.Sink.Send(ev)
	t.flight.Wrote()
	return err
}

// Flush implements llm.Sink.
func (t *teeSink) Flush() error {
	t.flight.Writing()
	err := t.Sink.Flush()
	t.flight.Wrote()
	return err
}

// cached is the cache stage, run after the request and concurrency limits and before the input
// is counted. For a model that caches and a request its policy allows, it looks the answer up
// (unless the client sent Cache-Control: no-cache) and replays it, or waits for an identical
// request in flight and replays its answer; otherwise it sets the call up to record the engine's
// answer for storing. done reports that the call was answered here, err being its result.
//
// A hit takes no tokens from the rate limits: the request counts against requests per minute and
// holds a concurrency slot while it replays, but no engine ran, so neither its input nor its
// output is charged (and the tokenizer does not run).
func (p *Pipeline) cached(ctx context.Context, c *Call, name string) (done bool, err error) {
	m := p.cache.Model(name)
	if m == nil {
		return false, nil
	}
	rec := &c.Record
	ctl := cache.ParseControl(c.Header)
	if ctl.NoStore || !m.Policy.Cacheable(c.request()) {
		rec.Cache = CacheBypass
		return false, nil
	}
	cc := &c.cache
	// The truncate directive is in the key: context planning, after this stage, cuts by it what
	// the engine is sent (or lets a request through that would otherwise be refused). Answers
	// belong to the key that asked, unless the model shares them across keys.
	cut := cache.Truncate{On: c.st.set.Truncate, Budget: c.st.set.TruncateBudget}
	cc.model, cc.canon = m, cache.EncodeTruncated(m.Tenant(c.Record.Key), m.Name, c.request(), cut)
	// The pass-through path answers with the engine's bytes, which could not be replayed in
	// another format: a request whose answer will be stored takes the event path.
	c.Forward = nil
	cc.tee = teeSink{Sink: c.Sink}
	if ctl.NoCache {
		rec.Cache = CacheRefresh
		return false, nil
	}
	for elections := 0; ; elections++ {
		if e, ok := m.Get(ctx, cc.canon); ok {
			return true, p.hit(c, e, CacheHit)
		}
		f, leader := m.Join(cc.canon)
		if leader {
			// A leader that finished between the lookup and Join stored its answer before it
			// left: look again, or this call would be a second engine call for the same answer.
			if e, ok := m.Get(ctx, cc.canon); ok {
				m.Finish(cc.canon, f, e)
				return true, p.hit(c, e, CacheHit)
			}
			// A store shared by replicas: claim the filling of the key, or wait (briefly) for
			// the replica that holds the claim to store its answer.
			if e := m.Claim(ctx, cc.canon); e != nil {
				m.Finish(cc.canon, f, e)
				return true, p.hit(c, e, CacheCoalesced)
			}
			cc.flight, cc.tee.flight = f, f
			rec.Cache = CacheMiss
			return false, nil
		}
		if f == nil {
			// Another request with the same key is in flight: a collision of the hash, so
			// this one goes to the engine on its own (and stores its answer).
			rec.Cache = CacheMiss
			return false, nil
		}
		// A follower waits for the leader's complete answer and replays it at full speed. If
		// the leader's own client went away, the followers elect a new leader among them (a
		// few times at most); if the leader produced no answer otherwise (it failed, or a
		// fallback model answered), or its own client stopped reading it (a leader slower than
		// the engine), the follower goes to the engine itself and stores its own answer.
		e, err := f.Wait(ctx)
		if errors.Is(err, cache.ErrStalled) {
			rec.Cache = CacheMiss
			return false, nil
		}
		if err != nil {
			cc.release()
			return true, err
		}
		if e != nil {
			return true, p.hit(c, e, CacheCoalesced)
		}
		if !f.Abandoned() || elections == maxElections {
			rec.Cache = CacheMiss
			return false, nil
		}
	}
}

// hit replays e as the call's answer, recorded as how (CacheHit or CacheCoalesced); the call is
// done with the cache.
func (p *Pipeline) hit(c *Call, e *cache.Entry, how string) error {
	c.cache.release()
	c.Record.Cache = how
	if p.spend != nil {
		// No engine ran: the answer costs nothing, which a priced model's log, trace and
		// X-Layer0-Cost say (0) rather than leave out.
		_, c.Record.Priced = p.spend.Cost(e.Served, e.Engine, llm.Usage{}, 0)
	}
	return p.replay(c, e)
}

// release returns the call's encoding to its pool, once no flight it leads needs it.
func (c *cacheCall) release() {
	if c.canon != nil {
		c.canon.Release()
		c.canon = nil
	}
	c.model = nil
}

// maxElections bounds how often a follower takes part in electing a new leader after a leader's
// client went away, before it goes to the engine itself.
const maxElections = 3

// replay sends a stored answer to the call's sink, at full speed, and records it as the original
// answer's: its model, engine and usage.
func (p *Pipeline) replay(c *Call, e *cache.Entry) error {
	rec := &c.Record
	rec.Served, rec.Engine, rec.Simulated, rec.Usage = e.Served, e.Engine, e.Simulated, e.Usage
	ev := &c.cache.ev
	for i := range e.Events {
		*ev = e.Events[i]
		if (ev.Kind == llm.EventTextDelta || ev.Kind == llm.EventToolDelta) && ev.Text != "" {
			rec.Deltas++
			if rec.TTFT == 0 {
				rec.TTFT = time.Since(rec.Start)
			}
		}
		if err := c.Sink.Send(ev); err != nil {
			return err
		}
	}
	return c.Sink.Flush()
}

// tap puts the recorder between the attempt sink and the client's sink when the answer may be
// stored.
func (c *cacheCall) tap(s *attemptSink) {
	if c.model != nil {
		s.inner, s.tee = &c.tee, &c.tee
	}
}

// store keeps the call's answer after Serve succeeded: only an answer complete from start to
// stop, from the model asked for (not a fallback's), and ends the flight the call leads with it.
func (p *Pipeline) store(ctx context.Context, c *Call) {
	cc := &c.cache
	if cc.model == nil {
		return
	}
	rec := &c.Record
	var e *cache.Entry
	if storable(rec, cc.model) && !rec.Passed {
		if e = cc.tee.rec.Entry(rec.Served, p.cache.Now()); e != nil {
			e.Engine, e.Simulated = rec.Engine, rec.Simulated
			if rec.Cache == CacheRefresh {
				_ = cc.model.Replace(context.WithoutCancel(ctx), cc.canon, e)
			} else {
				_ = cc.model.Put(context.WithoutCancel(ctx), cc.canon, e)
			}
		}
	}
	if e == nil && cc.flight != nil {
		cc.model.Unclaim(context.WithoutCancel(ctx), cc.canon) // nothing to store: the waiting replicas go on
	}
	if cc.flight != nil {
		cc.model.Finish(cc.canon, cc.flight, e)
		cc.flight = nil
	}
}

// storable reports whether the answer rec describes may be stored in m, the cache of the model
// asked for: only one that model served itself, with no fallback. A fallback model's answer is
// another model's (for embeddings, vectors in another space): stored, it would be served for
// the model asked for, to every key it is shared with, for the whole TTL. The generation and
// embeddings paths both store through it.
func storable(rec *Record, m *cache.Model) bool {
	return rec.Served == m.Name && len(rec.Fallbacks) == 0
}

// end runs when Serve returns: a flight the call still leads (it failed) ends without an answer.
// When the call's own client went away the followers elect a new leader; otherwise each goes to
// the engine itself.
func (c *cacheCall) end(ctx context.Context) {
	if c.flight != nil {
		c.model.Unclaim(context.WithoutCancel(ctx), c.canon) // the call failed: the waiting replicas go on
		if ctx.Err() != nil {
			c.model.Abandon(c.canon, c.flight)
		} else {
			c.model.Finish(c.canon, c.flight, nil)
		}
		c.flight = nil
	}
	c.release()
}
