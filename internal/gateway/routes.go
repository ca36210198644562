package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// pickers are the replica pickers of a configuration's routing section, whose state (the
// round-robin's turn) carries over a reload that leaves the section unchanged.
type pickers struct {
	// fixed is routing.picker's; nil when unset (the route table's default, p2c).
	fixed route.Picker
	// prefix places the models with more than one replica with a prefix cache when
	// routing.picker is unset.
	prefix *route.Prefix
}

// pickerKey is the configuration pickers are built from.
type pickerKey struct {
	picker string
	prefix config.PrefixRouting
	sticky config.StickyRouting
}

func newPickers(rc config.Routing) pickers {
	pc := rc.Prefix
	sp := pc.Spread
	p := pickers{prefix: &route.Prefix{LoadTokens: pc.LoadTokens, Guard: route.Guard{Imbalance: pc.Imbalance, Slack: int64(pc.Slack)},
		Spread: route.Spread{MaxReplicas: sp.MaxReplicas, HotShare: sp.HotShare, Window: sp.Window,
			PrefixTokens: sp.PrefixTokens, MaxPrefixes: sp.MaxPrefixes, Idle: sp.Idle}}}
	p.fixed = p.named(rc, rc.Picker)
	return p
}

// named returns the picker a routing.picker (or a model's routing.picker) names; nil for "",
// the route table's default, and for an application's picker (which routes builds per model). The prefix picker is the one of the section; the others are new.
func (p pickers) named(rc config.Routing, name string) route.Picker {
	switch name {
	case config.PickerRoundRobin:
		return &route.RoundRobin{}
	case config.PickerPrefix:
		return p.prefix
	case config.PickerSticky:
		sc := rc.Sticky
		return &route.Sticky{Header: http.CanonicalHeaderKey(sc.Header), FallbackKey: sc.Fallback == config.StickyFallbackKey,
			Guard: route.Guard{Imbalance: sc.Imbalance, Slack: int64(sc.Slack)}}
	case config.PickerP2C:
		return route.P2C{}
	}
	return nil
}

// routes is what the pipeline routes with: the route table, the models it lists, what it needs
// of each replica, and the prefix index.
type routes struct {
	table   *route.Table
	models  []*pipeline.Model
	byID    map[string]*pipeline.Model
	engines map[*route.Replica]pipeline.Engine
	indexed map[string][]*prefix.Replica // by name clients may ask for
	prefix  *prefix.Index
}

// routes builds the generation's routes over its replicas and pickers (an application's among
// them, apps, by name).
func (g *generation) routes(now func() time.Time, apps map[string]func(string) route.AppPicker) (*routes, error) {
	cfg := g.cfg
	rc := route.Config{
		Aliases:              cfg.Aliases,
		UtilizationThreshold: cfg.Routing.FallbackUtilizationThreshold,
		Budget: route.BudgetConfig{Ratio: cfg.Routing.RetryBudget.Ratio, MinRetries: cfg.Routing.RetryBudget.MinRetries,
			Window: cfg.Routing.RetryBudget.Window},
		Now:          now,
		RecheckAfter: cfg.Routing.Health.Interval,
		Picker:       g.parts.pickers.Value().fixed,
	}
	rt := &routes{byID: map[string]*pipeline.Model{}, engines: map[*route.Replica]pipeline.Engine{},
		indexed: map[string][]*prefix.Replica{}}
	for _, id := range sortedNames(cfg.Models) {
		m, err := g.model(rt, id, apps)
		if err != nil {
			return nil, err
		}
		rc.Models = append(rc.Models, m)
	}
	for _, name := range sortedNames(cfg.Splits) {
		rc.Splits = append(rc.Splits, rt.split(name, cfg.Splits[name]))
	}
	for _, alias := range sortedNames(cfg.Aliases) {
		rt.alias(alias, cfg.Aliases[alias])
	}
	var err error
	if rt.table, err = route.New(rc); err != nil {
		return nil, fmt.Errorf("layer0: %w", err)
	}
	rt.prefix = prefix.NewIndex(tokenizer.Default(), rt.indexed)
	return rt, nil
}

// model adds the configured model id to rt and returns its route.
func (g *generation) model(rt *routes, id string, apps map[string]func(string) route.AppPicker) (route.Model, error) {
	mc := g.cfg.Models[id]
	m := route.Model{Name: id, Upstream: mc.UpstreamModel, ContextWindow: mc.ContextWindow, Fallbacks: mc.Fallback}
	pm := &pipeline.Model{ID: id, DisplayName: mc.DisplayName, Created: mc.Created, Context: contextPolicy(mc.Context),
		ShareAcrossKeys: mc.Cache.ShareAcrossKeys}
	for _, en := range mc.Engines {
		r := g.replicas[en]
		m.Replicas = append(m.Replicas, r.route)
		if c, ok := r.route.Engine.(engine.Counter); ok && pm.Tokens == nil {
			pm.Tokens = c
		}
		info := pipeline.Engine{URL: r.cfg.URL, Prefix: r.prefix}
		if r.prefix != nil {
			rt.indexed[id] = append(rt.indexed[id], r.prefix)
		}
		if r.sim != nil {
			// Engines behind a URL enforce their timeouts in the upstream client; the
			// embedded sim relies on the pipeline for the first byte.
			info.FirstByte = r.cfg.Timeouts.FirstByte
		}
		rt.engines[r.route] = info
	}
	name := mc.Routing.Picker
	if name == "" {
		name = g.cfg.Routing.Picker
	}
	if f, ok := apps[name]; ok {
		// An application's picker: one per model, built with each generation.
		p := f(id)
		if p == nil {
			return m, fmt.Errorf("layer0: model %s: the factory of picker %q returned no picker", id, name)
		}
		m.Picker = route.App{P: p}
	} else if mc.Routing.Picker != "" {
		m.Picker = g.parts.pickers.Value().named(g.cfg.Routing, mc.Routing.Picker) // the model's own
	} else if g.cfg.Routing.Picker == "" && len(rt.indexed[id]) > 1 {
		// Unset picker: a pool of replicas with prefix caches is placed by prefix; any
		// other pool by p2c (the table's default).
		m.Picker = g.parts.pickers.Value().prefix
	}
	rt.models = append(rt.models, pm)
	rt.byID[id] = pm
	return m, nil
}

// split adds the split name to rt and returns its route.
func (rt *routes) split(name string, sc config.Split) route.Split {
	s := route.Split{Name: name, Sticky: sc.Sticky}
	for _, t := range sc.Targets {
		s.Targets = append(s.Targets, route.Target{Model: t.Model, Weight: t.Weight})
	}
	rt.indexed[name] = unionReplicas(rt.indexed, sc.Targets)
	first := rt.byID[sc.Targets[0].Model]
	pm := &pipeline.Model{ID: name, DisplayName: name, Created: first.Created, Tokens: first.Tokens, Context: first.Context,
		ShareAcrossKeys: true}
	for _, t := range sc.Targets {
		// A split's replicas are its targets': it shares what every target shares.
		pm.ShareAcrossKeys = pm.ShareAcrossKeys && rt.byID[t.Model].ShareAcrossKeys
	}
	rt.models = append(rt.models, pm)
	rt.byID[name] = pm
	return s
}

// alias adds the alias of target to rt.
func (rt *routes) alias(alias, target string) {
	if reps := rt.indexed[target]; len(reps) > 0 {
		rt.indexed[alias] = reps
	}
	if t := rt.byID[target]; t != nil {
		rt.models = append(rt.models, &pipeline.Model{ID: alias, DisplayName: alias, Created: t.Created, Tokens: t.Tokens,
			Context: t.Context, ShareAcrossKeys: t.ShareAcrossKeys})
	}
}

// unionReplicas returns the indexed replicas of a split's targets, each once.
func unionReplicas(indexed map[string][]*prefix.Replica, targets []config.SplitTarget) []*prefix.Replica {
	var out []*prefix.Replica
	for _, t := range targets {
		for _, r := range indexed[t.Model] {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// contextPolicy is a model's context settings as the pipeline applies them.
func contextPolicy(c config.Context) pipeline.ContextPolicy {
	return pipeline.ContextPolicy{Truncate: c.Overflow == config.OverflowTruncate, Fixed: c.Split == config.SplitFixed,
		MaxTokensPerShard: c.MaxTokensPerShard}
}

// offloadTargets maps each offload target's name to the name it serves as.
func offloadTargets(ts map[string]config.OffloadTarget) map[string]string {
	m := make(map[string]string, len(ts))
	for name, t := range ts {
		m[name] = t.Model
	}
	return m
}
