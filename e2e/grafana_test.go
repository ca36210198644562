package e2e

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

var (
	promSelector = regexp.MustCompile(`\b(layer0_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	promBy       = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
)

// exprs collects every PromQL expression of a Grafana dashboard: the panels' targets (rows
// nest panels) and the template variables' queries.
func exprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			switch s, ok := c.(string); {
			case ok && (k == "expr" || k == "definition"):
				*out = append(*out, s)
			default:
				exprs(c, out)
			}
		}
	case []any:
		for _, c := range v {
			exprs(c, out)
		}
	}
}

// The Grafana dashboard asks only for what layer0 exports: every metric an expression names is
// registered (a histogram's _bucket, _sum and _count series included), every label it matches
// on or aggregates by is one of those metrics' labels, and it covers what an operator needs.
func TestGrafanaDashboardUsesRealMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/layer0.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/layer0.json: %v", err)
	}
	var all []string
	exprs(dash, &all)
	if len(all) < 10 {
		t.Fatalf("%d expressions in the dashboard: the walk or the file is wrong", len(all))
	}
	fams := servedRegistry(t)
	used := map[string]bool{}
	for _, e := range all {
		labels := map[string]bool{"le": true}
		sels := promSelector.FindAllStringSubmatch(e, -1)
		if len(sels) == 0 {
			t.Errorf("expression names no layer0 metric: %s", e)
		}
		for _, m := range sels {
			name := m[1]
			f, ok := fams[name]
			if !ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, cut := strings.CutSuffix(name, suffix); cut {
						if f, ok = fams[base]; ok {
							name = base
							break
						}
					}
				}
			}
			if !ok {
				t.Errorf("%s is not a metric layer0 registers (in %s)", m[1], e)
				continue
			}
			used[name] = true
			for l := range f.labels {
				labels[l] = true
			}
			for _, mm := range promMatcher.FindAllStringSubmatch(m[2], -1) {
				if _, ok := f.labels[mm[1]]; !ok && mm[1] != "le" {
					t.Errorf("%s has no label %q (in %s)", name, mm[1], e)
				}
			}
		}
		for _, by := range promBy.FindAllStringSubmatch(e, -1) {
			for l := range strings.SplitSeq(by[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !labels[l] {
					t.Errorf("aggregation by %q, a label none of its metrics has (in %s)", l, e)
				}
			}
		}
	}
	for _, want := range []string{"layer0_requests_total", "layer0_time_to_first_token_seconds", "layer0_inter_token_latency_seconds",
		"layer0_overhead_seconds", "layer0_fallback_total", "layer0_cache_requests_total", "layer0_engine_up", "layer0_engine_ejected"} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}
