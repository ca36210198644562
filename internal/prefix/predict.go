package prefix

import (
	"fmt"
	"sync"
)

// Predictions checked against the engine: every answer whose engine reports the prompt tokens
// it served from its cache is compared with what the index predicted for the replica when the
// request was placed (Observe). The replica keeps the share of its last PredictionWindow
// predictions that equalled the engine's report (Agreement). In precise mode, a replica whose
// predictions drift — fewer than half right over a full window: a tokenizer, chat template or
// block size other than the engine's, or a cache change its events did not describe — falls
// back to approximate mode by itself, and says why once, as the agreement check does.
//
// An engine that never reports cached tokens (an OpenAI-compatible server without prefix
// caching, or without prompt_tokens_details) answers 0 every time: its answers are not
// evidence until it has reported some cached tokens once.

// PredictionWindow is how many of a replica's last predictions its agreement is over.
const PredictionWindow = 64

// predictions is a replica's record of its last predictions.
type predictions struct {
	mu      sync.Mutex
	reports bool // the engine has reported cached tokens at least once
	right   [PredictionWindow]bool
	n, next int // predictions in the window; where the next goes
	agreed  int // true entries in the window
}

// Observe compares a prediction of the replica's cached tokens for a request, predicted, with
// what its engine then reported serving from its cache, engine, and reports whether the pair
// counted (the engine is known to report cached tokens). A drifting precise replica falls back
// to approximate mode.
func (r *Replica) Observe(predicted, engine int) bool {
	if r == nil {
		return false
	}
	p := &r.pred
	p.mu.Lock()
	if engine > 0 {
		p.reports = true
	}
	if !p.reports {
		p.mu.Unlock()
		return false
	}
	ok := predicted == engine
	if p.n == PredictionWindow {
		if p.right[p.next] {
			p.agreed--
		}
	} else {
		p.n++
	}
	p.right[p.next] = ok
	if ok {
		p.agreed++
	}
	p.next = (p.next + 1) % PredictionWindow
	n, agreed := p.n, p.agreed
	p.mu.Unlock()
	if x := r.exact; x != nil && n == PredictionWindow && 2*agreed < n && x.active() {
		x.disagree(r.name, fmt.Sprintf("predictions drift: %d of the last %d predictions of the tokens served from "+
			"the engine's cache equal its report (a tokenizer, chat template or block size other than the engine's, "+
			"or a cache change its events did not describe)", agreed, n))
	}
	return true
}

// Agreement returns the share, 0 to 1, of the replica's last predictions (at most
// PredictionWindow) that equalled the engine's report, and how many that is over; 0, 0 before
// any counted.
func (r *Replica) Agreement() (share float64, n int) {
	if r == nil {
		return 0, 0
	}
	p := &r.pred
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return 0, 0
	}
	return float64(p.agreed) / float64(p.n), p.n
}
