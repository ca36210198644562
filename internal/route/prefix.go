package route

import (
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/layer0ai/layer0/internal/prefix"
)

// PromptPicker is a Picker that can weigh the request's prompt: the plan calls PickPrompt
// instead of Pick when the request's prompt was rendered (Plan.SetPrompt), and d receives the
// inputs and the decision, for the request's record.
type PromptPicker interface {
	Picker
	PickPrompt(cands []*Replica, p *prefix.Prompt, d *Decision) int
}

// MaxDecisionReplicas is how many candidates a Decision keeps the inputs of.
const MaxDecisionReplicas = 8

// Decision is what a PromptPicker weighed and chose, for the request's record.
type Decision struct {
	// Picker names the picker ("prefix" or "sticky"); "" when no PromptPicker or SessionPicker
	// decided.
	Picker string
	// Reason is why the chosen replica won. For "prefix": "cache" (the lowest expected cost,
	// with a cached share), "load" (the lowest cost with nothing cached anywhere, or a tie
	// broken by load), "hot" (the prompt's prefix is hot: it is spread over a set of Spread
	// replicas, and the request goes to the cheapest of them not over the guard), or "spread" (the replica
	// chosen was too loaded against the least loaded candidate: the request goes to the
	// cheapest of the others, which then warms). For "sticky": "session" (the
	// session's own replica), "spread" (passed over by the guard) or "load" (no session).
	Reason string
	// PromptTokens is the prompt's length in tokens.
	PromptTokens int
	// Spread is how many replicas the prompt's hot prefix is spread over (Prefix.Spread): set
	// with reason "hot", and with "spread" when every member was over the guard; 0 when the
	// prefix is not spread.
	Spread int
	// Chosen is the index in Candidates of the chosen replica.
	Chosen int
	// N is how many of Candidates are filled (at most MaxDecisionReplicas; later candidates
	// were weighed but are not kept).
	N int
	// Candidates are the inputs per candidate replica.
	Candidates [MaxDecisionReplicas]Candidate
	// NSkipped is how many of Skipped are filled (at most MaxDecisionReplicas).
	NSkipped int
	// Skipped are the model's replicas that were not candidates, and why.
	Skipped [MaxDecisionReplicas]Skip
	// Owned is set when each candidate's Own was counted too (Plan.SetOwn): what a trace read
	// by the request's own key, not an admin, may show.
	Owned bool
}

// Skip is a replica of the model a pick did not weigh.
type Skip struct {
	Replica string
	// Reason is one of SkipDown, SkipEjected, SkipBreaker, SkipUtilization, SkipTried.
	Reason string
}

// Candidate is what the picker knew of one replica.
type Candidate struct {
	Replica     string
	Cached      int     // prompt tokens the prefix index expects the replica to hold
	Own         int     // of Cached, those the request's own key put there (Decision.Owned)
	Outstanding int64   // requests in flight there
	Utilization float64 // 0 to 1, from the engine's metrics
	Cost        float64 // expected cost in prompt-token units: uncached prefill plus queueing
}

// Prefix is the prefix-cache-aware picker: it sends a request where its prompt is expected to
// be cached, balanced against load. Each candidate's expected cost, in prompt tokens of prefill
// work, is
//
//	(prompt − cached) + LoadTokens × (outstanding + utilization)
//
// — the prefill it must still compute, plus the work already queued ahead of the request — and
// the cheapest wins, ties going to the less loaded. A prompt no replica holds any of goes to the
// least loaded, in turn among equals, so that new prefixes spread over the pool. A hot prefix must not pile onto one replica:
// when the cheapest has more than Imbalance times (plus Slack) the requests in flight of the
// least loaded candidate, the request goes to the cheapest of the others instead, which then
// warms and shares the prefix. A prefix that keeps its replica over the guard is hot: it gets a
// set of replicas, grown one at a time up to Spread.MaxReplicas while it stays hot and shrunk as
// it cools, and its requests go to its cheapest member not over the guard (reason "hot"; see
// Spread).
// Candidates without an index entry count as holding nothing. A
// request without a rendered prompt is picked by Fallback. The zero value uses the defaults; a
// Prefix must not be copied after first use.
type Prefix struct {
	// LoadTokens is the prefill work one request in flight is worth, in prompt tokens.
	// Default 128: on a pool of four replicas with caches short of the working set, 512 let
	// every imbalance of two requests in flight send a 1,000-token prefix to a cold replica,
	// and the copies it warmed evicted other groups' prefixes (71% of prompt tokens from cache
	// against 91% at 128; TestPrefixRoutingBenchmark).
	LoadTokens float64
	// Guard spreads a hot prefix: when the cheapest candidate is over it against the least
	// loaded, the request goes to the cheapest of the others.
	Guard Guard
	// Spread spreads a prefix that keeps its replica over the guard over a set of replicas. It
	// is read at the first pick.
	Spread Spread
	// Fallback picks when there is no prompt. Default P2C{}.
	Fallback Picker

	turn atomic.Uint64 // rotates new prefixes among equally loaded replicas
	hot  hotSets       // the hot prefixes' sets (spread.go)
}

// Pick implements Picker for requests without a prompt.
func (p *Prefix) Pick(cands []*Replica) int {
	if p.Fallback != nil {
		return p.Fallback.Pick(cands)
	}
	return P2C{}.Pick(cands)
}

// SetPrompt gives the plan the request's rendered prompt, for a PromptPicker, and where each
// pick's inputs and decision go (the request's record: no allocation here). Both must stay
// valid until the plan is done. Without them, or with another picker, every pick is the
// picker's Pick and d is left as it was.
func (pl *Plan) SetPrompt(p *prefix.Prompt, d *Decision) { pl.prompt, pl.decision = p, d }

// SetOwn has each prompt pick also count, per candidate, the cached tokens tenant's own
// requests put there (prefix.Replica.MatchOwn) into Candidate.Own, and set Decision.Owned. The
// pick itself still weighs everything the replica holds (Cached): that is the engine's cache.
// Own is what a decision trace may show to a reader who is not an operator (trace), so that
// another key's prompts are no answer to give; it costs a second match per candidate, so the
// pipeline asks for it only for keys that may read their own traces.
func (pl *Plan) SetOwn(tenant string) { pl.own, pl.owned = tenant, true }

// SetHeader gives the plan the request's headers, where a SessionPicker finds the session. h
// must stay valid until the plan is done; the decision goes where SetPrompt said.
func (pl *Plan) SetHeader(h http.Header) { pl.header = h }

// pick chooses among cands, the candidates of m, with m's picker, weighing the prompt or the
// session when it can (an application's picker, App, is given the request); then the replicas
// of m left out of cands, and why, go on the decision.
func (pl *Plan) pick(m *model, cands []*Replica, now time.Time) int {
	if a, ok := m.picker.(App); ok {
		return pl.pickApp(a, m, cands)
	}
	if pl.decision == nil {
		return m.picker.Pick(cands)
	}
	var i int
	switch pk := m.picker.(type) {
	case SessionPicker:
		i = pk.PickSession(cands, pk.Session(pl.header, pl.key), pl.decision)
	case PromptPicker:
		if pl.prompt == nil {
			return m.picker.Pick(cands)
		}
		if px, ok := pk.(*Prefix); ok {
			// One picker serves every model of the routing section: a prefix's hot set is
			// the model's own.
			i = px.pickPrompt(cands, pl.prompt, pl.decision, xxh3.HashString(m.name))
		} else {
			i = pk.PickPrompt(cands, pl.prompt, pl.decision)
		}
		if pl.owned {
			d := pl.decision
			for j := 0; j < d.N; j++ {
				c := &d.Candidates[j]
				c.Own = 0
				for _, r := range cands {
					if r.Name == c.Replica {
						c.Own = min(r.Prefix.MatchOwn(pl.prompt, pl.own), c.Cached)
						break
					}
				}
			}
			d.Owned = true
		}
	default:
		return m.picker.Pick(cands)
	}
	if len(cands) < len(m.replicas) {
		pl.skipped(m, cands, now)
	}
	return i
}

// skipped records on the decision the replicas of m that are not in cands, and why.
func (pl *Plan) skipped(m *model, cands []*Replica, now time.Time) {
	d := pl.decision
	d.NSkipped = 0
next:
	for _, r := range m.replicas {
		if d.NSkipped == MaxDecisionReplicas {
			return
		}
		for _, c := range cands {
			if c == r {
				continue next
			}
		}
		why := SkipTried
		if !slices.Contains(pl.tried, r) {
			if why = r.unavailableReason(now); why == "" {
				why = SkipUtilization
			}
		}
		d.Skipped[d.NSkipped] = Skip{Replica: r.Name, Reason: why}
		d.NSkipped++
	}
}

// cold returns the least loaded candidate, equals taken in turn.
func (p *Prefix) cold(cands []*Replica) int {
	var minLoad float64
	ties := 0
	for i, r := range cands {
		load := float64(r.Outstanding()) + r.Utilization()
		switch {
		case i == 0 || load < minLoad:
			minLoad, ties = load, 1
		case load == minLoad:
			ties++
		}
	}
	k := int(p.turn.Add(1) % uint64(ties))
	for i, r := range cands {
		if float64(r.Outstanding())+r.Utilization() == minLoad {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return 0 // the loads moved meanwhile
}

// PickPrompt implements PromptPicker.
func (p *Prefix) PickPrompt(cands []*Replica, pr *prefix.Prompt, d *Decision) int {
	return p.pickPrompt(cands, pr, d, 0)
}

// pickPrompt is PickPrompt for the model whose name hashes to pool (0 when unknown), which
// scopes the hot prefixes' sets.
func (p *Prefix) pickPrompt(cands []*Replica, pr *prefix.Prompt, d *Decision, pool uint64) int {
	loadTokens := p.LoadTokens
	if loadTokens <= 0 {
		loadTokens = 128
	}
	n := len(pr.Tokens)
	*d = Decision{Picker: "prefix", PromptTokens: n}
	best, least := -1, -1
	var bestCost, bestLoad float64
	var bestCached int
	var leastOut int64
	for i, r := range cands {
		cached := r.Prefix.Match(pr)
		out := r.Outstanding()
		util := r.Utilization()
		load := float64(out) + util
		cost := float64(n-cached) + loadTokens*load
		if i < MaxDecisionReplicas {
			d.Candidates[i] = Candidate{Replica: r.Name, Cached: cached, Outstanding: out, Utilization: util, Cost: cost}
			d.N = i + 1
		}
		if best < 0 || cost < bestCost || cost == bestCost && load < bestLoad {
			best, bestCost, bestLoad, bestCached = i, cost, load, cached
		}
		if least < 0 || out < leastOut {
			least, leastOut = i, out
		}
	}
	if bestCached == 0 {
		// No replica holds any of the prompt: a new prefix goes to the least loaded, in turn
		// among equals, so that new prefixes spread over the pool instead of all warming the
		// first replica.
		d.Reason = "load"
		best = p.cold(cands)
	} else {
		d.Reason = "cache"
	}
	// cost is candidate i's cost and load, as weighed above.
	cost := func(i int) (float64, float64) {
		if i < MaxDecisionReplicas {
			c := &d.Candidates[i]
			return c.Cost, float64(c.Outstanding) + c.Utilization
		}
		r := cands[i]
		load := float64(r.Outstanding()) + r.Utilization()
		return float64(n-r.Prefix.Match(pr)) + loadTokens*load, load
	}
	over := len(cands) > 1 && p.Guard.Over(cands[best].Outstanding(), leastOut)
	if len(cands) > 1 {
		// A hot prefix goes to a replica of its set (spread.go).
		if i, k := p.spread(cands, pr, pool, best, over, leastOut, cost); k > 1 {
			best, d.Reason, d.Spread = i, "hot", k
			over = p.Guard.Over(cands[best].Outstanding(), leastOut)
		}
	}
	if over {
		// The guard: the cheapest of the others, which then warms.
		second := -1
		var secondCost, secondLoad float64
		for i := range cands {
			if i == best {
				continue
			}
			cost, load := cost(i)
			if second < 0 || cost < secondCost || cost == secondCost && load < secondLoad {
				second, secondCost, secondLoad = i, cost, load
			}
		}
		best, d.Reason = second, "spread"
	}
	d.Chosen = best
	return best
}
