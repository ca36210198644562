package route

import (
	"net/http"

	"github.com/layer0ai/layer0/internal/config"
)

// Guard is the overload guard of the affinity pickers (Prefix, Sticky): a replica a request
// has affinity to is over the guard when it has more than Imbalance times the requests in flight
// of the least loaded candidate, plus Slack; the request then goes elsewhere. The zero value
// uses the defaults (config.DefaultRoutingImbalance and config.DefaultRoutingSlack).
type Guard struct {
	// Imbalance is the ratio of requests in flight, against the least loaded, beyond Slack.
	Imbalance float64
	// Slack is how many requests in flight above Imbalance × the least loaded's are let by.
	Slack int64
}

// Over reports whether a replica with out requests in flight is over the guard when the least
// loaded candidate has least.
func (g Guard) Over(out, least int64) bool {
	imbalance, slack := g.Imbalance, g.Slack
	if imbalance <= 0 {
		imbalance = config.DefaultRoutingImbalance
	}
	if slack <= 0 {
		slack = config.DefaultRoutingSlack
	}
	return float64(out) > imbalance*float64(least)+float64(slack)
}

// LoadWeigher is a Picker that weighs each replica's load itself (Prefix, Sticky). Among a
// model's replicas it is given every one that can serve, as long as one of them is at or below
// the utilisation threshold, rather than only those below: a replica whose last utilisation
// sample was high stays in the choice with its cache, weighed by its load, instead of being
// passed over until the next sample. A model whose replicas are all above the threshold is still
// passed over for a fallback model below it.
type LoadWeigher interface {
	Picker
	// WeighsLoad marks the picker; it does nothing.
	WeighsLoad()
}

// WeighsLoad implements LoadWeigher.
func (*Sticky) WeighsLoad() {}

// WeighsLoad implements LoadWeigher.
func (*Prefix) WeighsLoad() {}

// SessionPicker is a Picker that keeps the requests of one session on one replica: the plan
// asks it for the request's session (from its headers and API key name) and calls PickSession
// with it, d receiving the inputs and the decision for the request's record.
type SessionPicker interface {
	Picker
	// Session returns the request's session key; "" when the request names none.
	Session(h http.Header, key string) string
	// PickSession returns an index into cands, which is never empty.
	PickSession(cands []*Replica, session string, d *Decision) int
}

// Sticky is session affinity: every request of one session goes to the same replica, chosen by
// rendezvous (highest random weight) hashing of the session over the candidates. The session is
// the request's Header, or the API key's name when the header is absent and FallbackKey is set.
// Because each replica's weight for a session depends on that pair alone, a replica leaving the
// candidates (ejected, down, its breaker open) moves only its own sessions, each to its next
// replica in the session's hash order, and they come back when it returns. The same Guard as the
// prefix picker keeps a hot session (or a key sending many) from piling onto one replica: a
// replica over the guard is passed over for the next one in the hash order. A request without a
// session goes to Fallback. The zero value reads no session: set Header, FallbackKey or both.
type Sticky struct {
	// Header is the canonical name (http.CanonicalHeaderKey) of the header naming the session;
	// "" for none.
	Header string
	// FallbackKey keys a request without the header on its API key's name.
	FallbackKey bool
	// Guard spills a session off a replica with too many requests in flight.
	Guard Guard
	// Fallback picks when there is no session. Default P2C{}.
	Fallback Picker
}

// Pick implements Picker for requests without a session.
func (s *Sticky) Pick(cands []*Replica) int {
	if s.Fallback != nil {
		return s.Fallback.Pick(cands)
	}
	return P2C{}.Pick(cands)
}

// Session implements SessionPicker.
func (s *Sticky) Session(h http.Header, key string) string {
	if s.Header != "" {
		if v := h[s.Header]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	if s.FallbackKey {
		return key
	}
	return ""
}

// PickSession implements SessionPicker: the candidate with the highest weight for the session
// that is not over the guard (the least loaded never is). The decision's reason is "session"
// for the session's own replica, "spread" when the guard passed it over, "load" without a
// session. Each candidate's Cost is its rank in the session's hash order (0 first).
func (s *Sticky) PickSession(cands []*Replica, session string, d *Decision) int {
	*d = Decision{Picker: "sticky"}
	if session == "" {
		i := s.Pick(cands)
		d.Reason, d.Chosen = "load", i
		d.N = fill(d, cands, nil)
		return i
	}
	var weights [MaxDecisionReplicas]uint64
	least, leastAt := int64(-1), 0
	top, best := -1, -1
	var topW, bestW uint64
	for i, r := range cands {
		if out := r.Outstanding(); least < 0 || out < least {
			least, leastAt = out, i
		}
	}
	sk := stickyKey(session)
	for i, r := range cands {
		w := rendezvous(sk, r.Name)
		if i < MaxDecisionReplicas {
			weights[i] = w
		}
		if top < 0 || w > topW {
			top, topW = i, w
		}
		if !s.Guard.Over(r.Outstanding(), least) && (best < 0 || w > bestW) {
			best, bestW = i, w
		}
	}
	if best < 0 {
		best = leastAt // the loads moved between the two passes
	}
	d.Reason = "session"
	if best != top {
		d.Reason = "spread"
	}
	d.Chosen = best
	d.N = fill(d, cands, weights[:min(len(cands), MaxDecisionReplicas)])
	return best
}

// fill records the candidates' loads on d, with their ranks by weight (highest first) as Cost
// when weights are given, and returns how many it kept.
func fill(d *Decision, cands []*Replica, weights []uint64) int {
	n := min(len(cands), MaxDecisionReplicas)
	for i := range n {
		r := cands[i]
		c := Candidate{Replica: r.Name, Outstanding: r.Outstanding(), Utilization: r.Utilization()}
		if weights != nil {
			for j := range weights {
				if weights[j] > weights[i] {
					c.Cost++
				}
			}
		}
		d.Candidates[i] = c
	}
	return n
}

// rendezvous is the weight of replica for the session whose stickyKey is sk: the splits' stable
// FNV-1a hash of the pair, finished with SplitMix64's mixer so that every bit of the weight
// depends on every input byte (FNV-1a alone orders replicas with similar names alike for many
// sessions).
func rendezvous(sk uint64, replica string) uint64 {
	z := fnvAdd(sk, replica)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
