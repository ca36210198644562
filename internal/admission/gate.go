// Package admission is fair admission in front of saturated engine pools. When a model's
// replicas are all busy, a request waits in layer0 — bounded in count, memory and time — instead
// of inside an engine, where it would delay everyone behind it. Waiting requests are released
// as slots free: the highest priority band first, and within a band the tenants (API keys, or
// their teams) share the pool by weight through deficit round robin (drr.go). A request that
// cannot be released within its deadline is shed at once with an overloaded error and
// retry-after, estimated from its place in the queue and the pool's observed service time.
//
// A Gate is one generation's policy (bands, keys, pools); the queues themselves live in a Set
// that outlives reloads, so waiting requests and slots in flight carry over.
package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// PriorityHeader is the request header naming a band, honoured when the key may ask for it.
const PriorityHeader = "X-Layer0-Priority"

// AnyBand in KeyPolicy.Allow lets a key ask for any band.
const AnyBand = "*"

// Band is a priority band.
type Band struct {
	// Name is how keys and the priority header name the band.
	Name string
	// Priority orders the bands: a higher one is released first.
	Priority int
	// MaxWait is the longest a request of the band waits for a slot; one that cannot be
	// released within it is shed.
	MaxWait time.Duration
	// Sheddable requests are the first refused under pressure: a full queue evicts them for a
	// request of a higher band.
	Sheddable bool
	// MaxShare, between 0 and 1, is the most of the pool's capacity the band's requests may hold
	// at once; the rest is kept for higher bands, so a burst of the band cannot take every slot
	// just before a higher band's request arrives. 0 or 1: all of it.
	MaxShare float64
}

// KeyPolicy is what admission knows of an API key.
type KeyPolicy struct {
	// Band is the key's band; "" is the default band.
	Band string
	// Allow lists the bands the key may ask for with the priority header (AnyBand for all).
	Allow []string
	// Weight is the key's share within its band. Default 1.
	Weight float64
	// Team, when set, is the tenant the key's requests count as: keys of one team share one
	// weight. Default "": the key is its own tenant.
	Team string
}

// Config is what a Gate is built from.
type Config struct {
	// Bands are the priority bands; at least one.
	Bands []Band
	// DefaultBand names the band of a key without one. Required.
	DefaultBand string
	// Keys are the keys' policies by key name; a key not listed has the zero KeyPolicy.
	Keys map[string]KeyPolicy
	// Pools are the gated models' pools by model name; a model not listed is not gated.
	Pools map[string]*Pool
	// Queues are the queues, carried over from the previous generation's Gate. Required.
	Queues *Set
}

// Gate is one generation's admission policy over the process's queues. Safe for concurrent use.
type Gate struct {
	set   *Set
	bands map[string]*Band
	def   *Band
	keys  map[string]KeyPolicy
	pools map[string]*Pool
}

// New builds a gate, checking that the bands and the keys' bands exist.
func New(c Config) (*Gate, error) {
	if c.Queues == nil {
		return nil, errors.New("admission: no queue set")
	}
	g := &Gate{set: c.Queues, bands: map[string]*Band{}, keys: c.Keys, pools: c.Pools}
	for i := range c.Bands {
		b := c.Bands[i]
		if b.MaxWait <= 0 {
			return nil, fmt.Errorf("admission: band %q: max wait must be positive", b.Name)
		}
		g.bands[b.Name] = &b
	}
	if g.def = g.bands[c.DefaultBand]; g.def == nil {
		return nil, fmt.Errorf("admission: default band %q is not a band", c.DefaultBand)
	}
	for name, k := range c.Keys {
		if k.Band != "" && g.bands[k.Band] == nil {
			return nil, fmt.Errorf("admission: key %q: band %q is not a band", name, k.Band)
		}
	}
	return g, nil
}

// Queues is the gate's queue set, for the next generation's gate.
func (g *Gate) Queues() *Set { return g.set }

// Gated reports whether model's requests go through a queue.
func (g *Gate) Gated(model string) bool { return g != nil && g.pools[model] != nil }

// Acquire admits a request of the key named key for model (the canonical name of the model its
// plan serves first), with headers h and an estimated size, filling d. A model not gated is
// admitted at once with the zero Slot and d untouched. The error is the client's: a 400 for an
// unknown band, a 403 for a band the key may not ask for, or the overloaded error of a shed
// request.
func (g *Gate) Acquire(ctx context.Context, model, key string, h http.Header, size int64, d *Decision) (Slot, error) {
	pool := g.pools[model]
	if pool == nil {
		return Slot{}, nil
	}
	kp := g.keys[key]
	band, err := g.band(kp, h)
	if err != nil {
		return Slot{}, err
	}
	t := Ticket{Band: band, Tenant: tenantOf(key, kp), Weight: kp.Weight, Bytes: size}
	if t.Weight <= 0 {
		t.Weight = 1
	}
	return g.set.queue(model).Acquire(ctx, pool, t, d)
}

// tenantOf is the tenant of a key's requests: its team when it has one, else the key itself.
func tenantOf(key string, kp KeyPolicy) string {
	switch {
	case kp.Team != "":
		return kp.Team
	case key == "":
		return "anonymous"
	}
	return key
}

// band is the request's band: the one the priority header names, when the key may ask for it,
// else the key's own.
func (g *Gate) band(kp KeyPolicy, h http.Header) (*Band, error) {
	if name := h.Get(PriorityHeader); name != "" {
		b := g.bands[name]
		if b == nil {
			return nil, &apierr.Error{Kind: apierr.InvalidRequest, Code: "UNKNOWN_PRIORITY",
				Message: PriorityHeader + ": " + strconv.Quote(name) + " is not a priority band"}
		}
		if b.Name != kp.Band && !slices.Contains(kp.Allow, AnyBand) && !slices.Contains(kp.Allow, b.Name) {
			return nil, &apierr.Error{Kind: apierr.Permission, Code: "PRIORITY_NOT_ALLOWED",
				Message: PriorityHeader + ": this API key may not ask for priority " + strconv.Quote(name)}
		}
		return b, nil
	}
	if kp.Band != "" {
		return g.bands[kp.Band], nil
	}
	return g.def, nil
}

// Set is the process's admission queues, one per model, kept across reloads.
type Set struct {
	now     func() time.Time
	metrics *Metrics

	mu     sync.Mutex
	queues map[string]*Queue
}

// NewSet returns an empty set whose queues read the clock now (time.Now when nil) and count in
// m (nothing when nil).
func NewSet(now func() time.Time, m *Metrics) *Set {
	return &Set{now: now, metrics: m, queues: map[string]*Queue{}}
}

// Metrics is the set's metrics (nil when it counts nothing).
func (s *Set) Metrics() *Metrics { return s.metrics }

// queue returns model's queue, made on first use.
func (s *Set) queue(model string) *Queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[model]
	if q == nil {
		q = NewQueue(model, s.now, s.metrics)
		s.queues[model] = q
	}
	return q
}

// Stats returns model's queue state (zero when it has none).
func (s *Set) Stats(model string) Stats {
	s.mu.Lock()
	q := s.queues[model]
	s.mu.Unlock()
	if q == nil {
		return Stats{}
	}
	return q.Stats()
}
