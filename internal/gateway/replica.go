package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine/sim"
	"github.com/layer0ai/layer0/internal/kvevents"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/upstream"
)

// replica is one engine with its routing state and how its load and health are read. Its KV
// cache's entry in the prefix index and the subscription to its KV-cache events live and die
// with it, as the engine's cache does.
type replica struct {
	cfg   config.Engine
	route *route.Replica
	sim   *sim.Engine // the embedded engine, whose load is read directly; nil otherwise
	// metricsURL is the engine's Prometheus endpoint to scrape for utilisation; "" when none.
	metricsURL string
	// probes is the client of the health checks and metrics scrapes; nil when there are none.
	probes *http.Client
	// prefix is the replica's entry in the prefix index; nil when not indexed.
	prefix *prefix.Replica
	// events follows the engine's KV-cache events for the index's precise mode; nil otherwise.
	events *kvevents.Subscriber
}

// replicaKey is the configuration a replica is built from: it carries over a reload only when
// its engine's configuration and the routing policy are both unchanged.
type replicaKey struct {
	engine config.Engine
	policy policyKey
}

// policyKey is the part of the routing configuration a replica's routing state is built with.
type policyKey struct {
	ejection config.Ejection
	breaker  config.Breaker
	health   config.Health
}

// close closes the replica's engine, its event subscription and its probe connections.
func (r *replica) close() error {
	if r.events != nil {
		r.events.Close()
	}
	if r.probes != nil {
		r.probes.CloseIdleConnections()
	}
	return r.route.Engine.Close()
}

// load returns the replica's load, read from the sim; ok is false for other engines.
func (r *replica) load() (metrics.Load, bool) {
	if r.sim == nil {
		return metrics.Load{}, false
	}
	st := r.sim.Stats()
	return metrics.Load{Running: float64(st.Running), Waiting: float64(st.Waiting), KVCacheUsage: st.KVCacheUsage}, true
}

// newReplica builds an engine and its routing state.
func newReplica(name string, ec config.Engine, pol policyKey, tok *tokenizer.Codec, o *Options) (*replica, error) {
	e, err := newEngine(name, ec, tok, o)
	if err != nil {
		return nil, err
	}
	p := route.PolicyOf(pol.ejection, pol.breaker, pol.health)
	p.Now, p.Logger = o.Now, o.Logger
	r := &replica{cfg: ec, route: route.NewReplica(name, e, p)}
	r.sim, _ = e.(*sim.Engine)
	if pc := ec.PrefixCache; pc.Indexed() {
		r.prefix = prefix.NewReplica(name, tok, pc.BlockTokens, pc.CapacityTokens)
		r.route.Prefix = r.prefix
		if pc.Mode == config.PrefixPrecise {
			ep := pc.Events
			if r.sim != nil && ep == ec.Sim.KVEvents {
				ep = r.sim.KVEventsEndpoint() // its port resolved
			}
			r.prefix.EnablePrecise(prefix.PreciseOptions{Logger: o.Logger})
			r.events = kvevents.Subscribe(ep, pc.EventsTopic, pc.EventsMaxBytes, r.prefix, o.Logger.With("engine", name))
		}
	}
	base := strings.TrimRight(ec.URL, "/")
	if ec.HealthPath != "" || ec.MetricsPath != "" {
		r.probes = newProbeClient()
	}
	if ec.HealthPath != "" {
		r.route.Probe = probe(r.probes, base+ec.HealthPath)
	}
	if ec.MetricsPath != "" {
		r.metricsURL = base + ec.MetricsPath
	}
	return r, nil
}

// probe returns an active health check: GET url, healthy on a 2xx answer.
func probe(hc *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
		}
		return nil
	}
}

// newProbeClient is the HTTP client of a replica's health checks and metrics scrapes: its own
// small pool (closed with the replica), no redirects, and no engine credential (neither
// endpoint needs one, so none is sent).
func newProbeClient() *http.Client {
	return &http.Client{
		Transport:     upstream.NewTransport(5*time.Second, nil),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
