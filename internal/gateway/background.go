package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/route"
)

// run is the gateway's background loop: every routing.utilization_interval it sets each
// replica's utilisation (read directly from sim engines, scraped from engines with a
// metrics_path), and every routing.health.interval it runs the active health checks of engines
// with a health_path. It reads the live generation on each tick, so a reload changes what it
// watches and how often. Timing here is the wall clock: it schedules work, it decides nothing.
func (g *Gateway) run() {
	defer close(g.done)
	ctx := g.ctx
	var lastHealth time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(g.tick(ctx, &lastHealth))
	}
}

// tick is one round of the loop, on the live generation, which it holds until done so that a
// reload does not close engines while they are being read; it returns the time to the next.
func (g *Gateway) tick(ctx context.Context, lastHealth *time.Time) time.Duration {
	gen := g.acquire()
	defer gen.release()
	rc := gen.cfg.Routing
	g.refreshLoad(ctx, gen, rc.UtilizationInterval)
	if time.Since(*lastHealth) >= rc.Health.Interval {
		*lastHealth = time.Now()
		g.checkHealth(ctx, gen)
	}
	return rc.UtilizationInterval
}

// refreshLoad sets every replica's utilisation from its load. A scrape that fails sets 0: an
// engine whose metrics cannot be read is not known to be busy, and skipping it would take it
// out of rotation over a metrics outage.
func (g *Gateway) refreshLoad(ctx context.Context, gen *generation, every time.Duration) {
	var wg sync.WaitGroup
	for name, r := range gen.replicas {
		if l, ok := r.load(); ok {
			r.route.SetUtilization(l.Utilization())
			continue
		}
		if r.metricsURL == "" {
			continue
		}
		wg.Add(1)
		go g.scrape(ctx, name, r, every, &wg)
	}
	wg.Wait()
}

func (g *Gateway) scrape(ctx context.Context, name string, r *replica, timeout time.Duration, wg *sync.WaitGroup) {
	defer wg.Done()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := metrics.Scrape(ctx, r.probes, r.metricsURL)
	if err != nil {
		g.logger.Debug("engine metrics scrape failed", "engine", name, "err", err)
		r.route.SetUtilization(0)
		return
	}
	r.route.SetUtilization(l.Utilization())
}

// checkHealth runs the active checks and logs each replica that changes between up and down.
func (g *Gateway) checkHealth(ctx context.Context, gen *generation) {
	rs := gen.pipe.Routes().Replicas()
	before := make([]bool, len(rs))
	for i, r := range rs {
		before[i] = r.Status().Down
	}
	if err := gen.pipe.Routes().Check(ctx); err != nil {
		g.logger.Debug("engine health checks failed", "err", err)
	}
	for i, r := range rs {
		switch down := r.Status().Down; {
		case down && !before[i]:
			g.logger.Warn("engine marked down by its health checks", "engine", r.Name)
		case !down && before[i]:
			g.logger.Info("engine healthy again", "engine", r.Name)
		}
	}
}

// engineStatus is the live replicas' state, for the engine health metrics.
func (g *Gateway) engineStatus() []route.Status {
	rs := g.gen.Load().pipe.Routes().Replicas()
	out := make([]route.Status, len(rs))
	for i, r := range rs {
		out[i] = r.Status()
	}
	return out
}

// engineLoad is the load of the embedded engine named name, for its vLLM-style metrics path.
func (g *Gateway) engineLoad(name string) (metrics.Load, bool) {
	r, ok := g.gen.Load().replicas[name]
	if !ok {
		return metrics.Load{}, false
	}
	return r.load()
}
