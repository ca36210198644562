package route

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/prefix"
)

// Ejection configures passive outlier ejection: a replica that fails ConsecutiveFailures times in
// a row is taken out for BaseTime, doubled on each further ejection up to MaxTime.
type Ejection struct {
	// ConsecutiveFailures ejects a replica after this many replica faults in a row. Default 5;
	// negative disables ejection.
	ConsecutiveFailures int
	// BaseTime is the length of the first ejection. Default 30s.
	BaseTime time.Duration
	// MaxTime caps an ejection's length; a replica that stays in for MaxTime after an ejection
	// starts again from BaseTime. Default 5m.
	MaxTime time.Duration
}

// Breaker configures the circuit breaker: closed, it opens when at least FailureRatio of the
// replica's requests in the last Window failed (with at least MinRequests of them); open, it lets
// nothing through for OpenTime; then half-open, it lets HalfOpenProbes requests through at a time,
// closing after that many successes and reopening on a failure.
type Breaker struct {
	// Window is the span over which the failure ratio is measured. Default 10s.
	Window time.Duration
	// MinRequests is how many requests the window must hold before the breaker may open.
	// Default 20.
	MinRequests int
	// FailureRatio is the share of failed requests, 0 to 1, that opens the breaker. Default 0.5;
	// a value above 1 never opens it.
	FailureRatio float64
	// OpenTime is how long the breaker stays open before it half-opens. Default 30s.
	OpenTime time.Duration
	// HalfOpenProbes is how many requests a half-open breaker lets through at once, and how
	// many successes close it. Default 1.
	HalfOpenProbes int
}

// Health configures active health checks (Replica.Check).
type Health struct {
	// UnhealthyThreshold is how many failed checks in a row mark a replica down. Default 2.
	UnhealthyThreshold int
	// HealthyThreshold is how many passed checks in a row mark a down replica up. Default 1.
	HealthyThreshold int
	// Timeout bounds one check. Default 5s.
	Timeout time.Duration
}

// Policy is how a replica's health is judged. Ejection, Breaker and Health are taken as given
// (PolicyOf makes them of a configuration, whose defaults internal/config fills in).
type Policy struct {
	Ejection Ejection
	Breaker  Breaker
	Health   Health
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives one line for each change of the replica's health: ejected and back,
	// marked down and up by the health checks, breaker opened and closed. Default: discarded.
	Logger *slog.Logger
}

// PolicyOf is the policy of a configuration's routing.ejection, routing.breaker and
// routing.health sections.
func PolicyOf(e config.Ejection, b config.Breaker, h config.Health) Policy {
	return Policy{
		Ejection: Ejection{ConsecutiveFailures: e.ConsecutiveFailures, BaseTime: e.BaseTime, MaxTime: e.MaxTime},
		Breaker: Breaker{Window: b.Window, MinRequests: b.MinRequests, FailureRatio: b.FailureRatio, OpenTime: b.OpenTime,
			HalfOpenProbes: b.HalfOpenProbes},
		Health: Health{UnhealthyThreshold: h.UnhealthyThreshold, HealthyThreshold: h.HealthyThreshold, Timeout: h.Timeout},
	}
}

func (p *Policy) setDefaults() {
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
}

// BreakerState is a circuit breaker's state.
type BreakerState uint8

// Breaker states.
const (
	Closed BreakerState = iota
	Open
	HalfOpen
)

// String names the state for metrics and the debug CLI.
func (s BreakerState) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "closed"
}

// windowBuckets is the breaker window's resolution.
const windowBuckets = 10

// Replica is one engine instance and its live state: requests outstanding, utilisation, active
// health, outlier ejection and circuit breaker. Make it with NewReplica; it is safe for concurrent
// use, and may serve several models (its load is then counted once).
type Replica struct {
	// Name identifies the replica in logs and metrics.
	Name string
	// Engine serves the requests.
	Engine engine.Engine
	// Probe, when set, is the active health check Check runs: nil error means healthy.
	Probe func(ctx context.Context) error
	// Prefix, when set, is the replica's entry in the prefix index, which prefix-aware pickers
	// ask how much of a prompt the replica holds.
	Prefix *prefix.Replica

	p Policy

	outstanding atomic.Int64
	limit       atomic.Int64  // requests it serves at once (SetLimit); 0: no limit
	util        atomic.Uint64 // math.Float64bits of the utilisation
	down        atomic.Bool   // marked down by active health checks
	// clear is true while the breaker is closed and the replica is not ejected: the pick path
	// then needs no lock.
	clear atomic.Bool

	mu           sync.Mutex
	consecutive  int       // replica faults in a row
	ejections    int       // ejections so far, the backoff exponent
	ejectedUntil time.Time // zero when not ejected
	lastEjection time.Time // end of the last ejection
	state        BreakerState
	openUntil    time.Time
	probes       int // half-open requests in flight
	successes    int // half-open successes so far
	window       [windowBuckets]bucket
	checkFails   int // failed active checks in a row
	checkOKs     int // passed active checks in a row
	latency      time.Duration
}

type bucket struct {
	epoch          int64 // window slot number the counts belong to
	total, failure int
}

// NewReplica returns a replica of e named name, judged by policy p (zero fields take defaults).
func NewReplica(name string, e engine.Engine, p Policy) *Replica {
	p.setDefaults()
	r := &Replica{Name: name, Engine: e, p: p}
	r.clear.Store(true)
	return r
}

// Outstanding is the number of requests the replica is serving now.
func (r *Replica) Outstanding() int64 { return r.outstanding.Load() }

// SetLimit records how many requests the replica serves at once (its engine's concurrency cap;
// the admission queue sets it for the pools it gates). A replica at its limit is left out of a
// pick while another replica below its limit can serve, so a pool admitted up to its capacity
// never queues inside one engine while another has room. 0 removes the limit.
func (r *Replica) SetLimit(n int) { r.limit.Store(int64(n)) }

// full reports whether the replica serves as many requests as its limit.
func (r *Replica) full() bool {
	l := r.limit.Load()
	return l > 0 && r.outstanding.Load() >= l
}

// SetUtilization records the replica's utilisation, 0 to 1 (the metrics scraper sets it from
// vllm:kv_cache_usage_perc and vllm:num_requests_waiting). Above the table's threshold the
// replica is skipped while another can serve.
func (r *Replica) SetUtilization(u float64) {
	if math.IsNaN(u) {
		u = 0
	}
	r.util.Store(math.Float64bits(u))
}

// Utilization returns what SetUtilization last recorded (0 at first).
func (r *Replica) Utilization() float64 { return math.Float64frombits(r.util.Load()) }

// Latency is a moving average of the replica's successful attempts' latency.
func (r *Replica) Latency() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latency
}

// Status is a snapshot of a replica's state, for metrics and the debug CLI.
type Status struct {
	Name         string
	Outstanding  int64
	Utilization  float64
	Down         bool      // marked down by active health checks
	EjectedUntil time.Time // zero when not ejected
	Breaker      BreakerState
	Latency      time.Duration
	// PrefixPrecise is set when the replica's prefix index is configured for precise mode, and
	// PrefixExact while it follows the engine's KV-cache events (not fallen back to the
	// approximate estimate).
	PrefixPrecise, PrefixExact bool
}

// Status returns the replica's state now.
func (r *Replica) Status() Status {
	now := r.p.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(now)
	st := Status{Name: r.Name, Outstanding: r.Outstanding(), Utilization: r.Utilization(), Down: r.down.Load(),
		EjectedUntil: r.ejectedUntil, Breaker: r.state, Latency: r.latency}
	st.PrefixPrecise, st.PrefixExact = r.Prefix.Precise()
	return st
}

// available reports whether the replica may take a request at now. It does not reserve
// anything; Begin does.
func (r *Replica) available(now time.Time) bool {
	if r.down.Load() {
		return false
	}
	if r.clear.Load() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(now)
	return r.admitsLocked()
}

// refreshLocked applies the transitions that happen by time alone: an ejection ending, an open
// breaker half-opening.
func (r *Replica) refreshLocked(now time.Time) {
	if !r.ejectedUntil.IsZero() && !now.Before(r.ejectedUntil) {
		r.lastEjection = r.ejectedUntil
		r.ejectedUntil = time.Time{}
		// Noticed at the first look after the ejection's end (a pick, a scrape, readiness).
		r.p.Logger.Info("replica back from ejection", "engine", r.Name, "at", r.lastEjection)
	}
	if r.state == Open && !now.Before(r.openUntil) {
		r.state, r.probes, r.successes = HalfOpen, 0, 0
	}
	r.clear.Store(r.ejectedUntil.IsZero() && r.state == Closed)
}

// Reasons a replica of the model was not among a pick's candidates (Skip.Reason).
const (
	SkipDown        = "down"        // the health checks mark it down
	SkipEjected     = "ejected"     // passive outlier ejection
	SkipBreaker     = "breaker"     // its breaker is open, or half-open with every probe slot taken
	SkipUtilization = "utilization" // above the utilisation threshold while another can serve
	SkipTried       = "tried"       // an earlier attempt of the request failed there
)

// unavailableReason says why r cannot take a request now (SkipDown, SkipEjected or
// SkipBreaker), or "" when it can.
func (r *Replica) unavailableReason(now time.Time) string {
	if r.down.Load() {
		return SkipDown
	}
	if r.clear.Load() {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(now)
	switch {
	case !r.ejectedUntil.IsZero():
		return SkipEjected
	case !r.admitsLocked():
		return SkipBreaker
	}
	return ""
}

func (r *Replica) admitsLocked() bool {
	if !r.ejectedUntil.IsZero() {
		return false
	}
	switch r.state {
	case Open:
		return false
	case HalfOpen:
		return r.probes < r.p.Breaker.HalfOpenProbes
	}
	return true
}

// Begin starts an attempt on the replica: it counts it outstanding and, when the breaker is
// half-open, takes a probe slot. It returns false (and counts nothing) when the replica cannot
// take a request now. Every true Begin must be followed by one Report. Plan.Next calls it.
func (r *Replica) Begin() bool {
	if r.down.Load() {
		return false
	}
	if !r.clear.Load() {
		now := r.p.Now()
		r.mu.Lock()
		r.refreshLocked(now)
		ok := r.admitsLocked()
		if ok && r.state == HalfOpen {
			r.probes++
		}
		r.mu.Unlock()
		if !ok {
			return false
		}
	}
	r.outstanding.Add(1)
	return true
}

// Report ends an attempt started by Begin: err is its outcome (nil for success), latency its
// duration. Replica faults (see Fault) feed outlier ejection and the breaker; errors that are not
// the replica's fault (the client's request, a cancellation, an upstream rate limit) count
// neither way. It returns what the report did to the replica's health.
func (r *Replica) Report(err error, latency time.Duration) (h Verdict) {
	r.outstanding.Add(-1)
	fault := false
	if err != nil {
		reason, _ := Classify(err)
		if !Fault(reason) {
			r.neutral()
			return h
		}
		fault = true
	}
	now := r.p.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(now)
	r.recordLocked(now, fault)
	if r.state == HalfOpen && r.probes > 0 {
		r.probes--
	}
	if !fault {
		r.consecutive = 0
		if r.latency == 0 {
			r.latency = latency
		} else {
			r.latency += (latency - r.latency) / 8
		}
		if r.state == HalfOpen {
			r.successes++
			if r.successes >= r.p.Breaker.HalfOpenProbes {
				r.state = Closed
				r.window = [windowBuckets]bucket{}
				r.p.Logger.Info("replica breaker closed", "engine", r.Name)
			}
		}
		r.refreshLocked(now)
		return h
	}
	r.consecutive++
	switch r.state {
	case HalfOpen:
		r.openLocked(now)
		h.BreakerOpened = true
	case Closed:
		total, failed := r.windowLocked(now)
		if total >= r.p.Breaker.MinRequests && float64(failed) >= r.p.Breaker.FailureRatio*float64(total) {
			r.openLocked(now)
			h.BreakerOpened = true
		}
	}
	if e := r.p.Ejection; e.ConsecutiveFailures > 0 && r.consecutive >= e.ConsecutiveFailures && r.ejectedUntil.IsZero() {
		if !r.lastEjection.IsZero() && now.Sub(r.lastEjection) >= e.MaxTime {
			r.ejections = 0
		}
		d := e.BaseTime
		for i := 0; i < r.ejections && d < e.MaxTime; i++ {
			d *= 2
		}
		d = min(d, e.MaxTime)
		r.ejectedUntil = now.Add(d)
		r.ejections++
		r.consecutive = 0
		h.Ejected = d
		reason, _ := Classify(err)
		r.p.Logger.Warn("replica ejected", "engine", r.Name, "for", d.String(), "until", r.ejectedUntil,
			"consecutive_failures", e.ConsecutiveFailures, "reason", reason, "err", err)
	}
	r.refreshLocked(now)
	return h
}

// Verdict is what one attempt's report did to its replica, for the request's record.
type Verdict struct {
	// Ejected, when positive, is how long the replica was ejected for.
	Ejected time.Duration
	// BreakerOpened is set when the failure opened the replica's breaker.
	BreakerOpened bool
}

// neutral ends an attempt that says nothing about the replica's health; it still frees a
// half-open probe slot.
func (r *Replica) neutral() {
	if r.clear.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == HalfOpen && r.probes > 0 {
		r.probes--
	}
}

func (r *Replica) openLocked(now time.Time) {
	r.state = Open
	r.openUntil = now.Add(r.p.Breaker.OpenTime)
	r.probes, r.successes = 0, 0
	r.p.Logger.Warn("replica breaker opened", "engine", r.Name, "until", r.openUntil)
}

// slot is the window bucket number of now.
func (r *Replica) slot(now time.Time) int64 {
	width := int64(r.p.Breaker.Window) / windowBuckets
	return now.UnixNano() / max(width, 1)
}

func (r *Replica) recordLocked(now time.Time, fault bool) {
	s := r.slot(now)
	b := &r.window[bucketIndex(s)]
	if b.epoch != s {
		*b = bucket{epoch: s}
	}
	b.total++
	if fault {
		b.failure++
	}
}

// windowLocked sums the buckets still inside the window.
func (r *Replica) windowLocked(now time.Time) (total, failed int) {
	s := r.slot(now)
	for _, b := range r.window {
		if b.epoch > s-windowBuckets && b.epoch <= s {
			total += b.total
			failed += b.failure
		}
	}
	return total, failed
}

// gate is when the replica may next be tried (ejection end or breaker half-open), zero if it
// is not held out by either.
func (r *Replica) gate(now time.Time) time.Time {
	if r.clear.Load() {
		return time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(now)
	var g time.Time
	if !r.ejectedUntil.IsZero() {
		g = r.ejectedUntil
	}
	if r.state == Open && r.openUntil.After(g) {
		g = r.openUntil
	}
	return g
}

// Check runs the replica's Probe once, bounded by the policy's timeout, and marks the replica
// down after UnhealthyThreshold failures in a row, up after HealthyThreshold passes in a row.
// It returns the probe's error. Without a Probe it does nothing. The server calls it
// periodically (Table.Check checks every replica).
func (r *Replica) Check(ctx context.Context) error {
	if r.Probe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.p.Health.Timeout)
	defer cancel()
	err := r.Probe(ctx)
	if err != nil {
		err = fmt.Errorf("route: health check of %s: %w", r.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.checkOKs = 0
		r.checkFails++
		if r.checkFails >= r.p.Health.UnhealthyThreshold && !r.down.Swap(true) {
			r.p.Logger.Warn("replica marked down by health checks", "engine", r.Name, "failed_checks", r.checkFails, "err", err)
		}
		return err
	}
	r.checkFails = 0
	r.checkOKs++
	if r.checkOKs >= r.p.Health.HealthyThreshold && r.down.Swap(false) {
		r.p.Logger.Info("replica marked up by health checks", "engine", r.Name)
	}
	return nil
}

// Unavailable says why the replica cannot take a request now — SkipDown, SkipEjected or
// SkipBreaker — or "" when it can (readiness asks it).
func (r *Replica) Unavailable() string { return r.unavailableReason(r.p.Now()) }
