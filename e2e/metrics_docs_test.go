package e2e

import (
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0"
)

// family is one registered metric as /metrics shows it: its label names, and the values each
// label took.
type family struct {
	labels map[string]map[string]bool
}

// servedRegistry serves every kind of request through a gateway with its own registry — a
// generation that falls back, a stream, a cache miss and hit, count_tokens, embeddings, the models list, a
// prefix-cache probe, a negotiate, an unknown path, a rate-limited key, an invalid request —
// and returns the layer0_ families registered then, by name.
func servedRegistry(t *testing.T) map[string]family {
	t.Helper()
	const keyA, keyB = "l0-metrics-key-a", "l0-metrics-key-b"
	reg := prometheus.NewRegistry()
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: a, hash: `+authHash(keyA)+`}
  - {name: b, hash: `+authHash(keyB)+`, limits: {requests_per_minute: 1}}
engines:
  primary: {kind: sim, sim: {fail: {status: 529}}}
  backup: {kind: sim}
models:
  chat: {engines: [primary], fallback: [backup]}
  backup: {engines: [backup]}
  cached: {engines: [backup], cache: {enabled: true}}
`), layer0.WithMetrics(reg), layer0.WithAccessLog(io.Discard))
	ctx := context.Background()
	c := anthropicClient(base, option.WithAPIKey(keyA), option.WithMaxRetries(0))
	if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 5, Messages: userText("hi")}); err != nil {
		t.Fatal(err)
	}
	s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "backup", MaxTokens: 8, Messages: userText("tell me")})
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "cached", MaxTokens: 5, Temperature: anthropic.Float(0),
			Messages: userText("same")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "chat",
		Messages: userText("count me")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Models.List(ctx, anthropic.ModelListParams{}); err != nil {
		t.Fatal(err)
	}
	emb, _ := http.NewRequest(http.MethodPost, base+"/v1/embeddings", strings.NewReader(`{"model":"backup","input":"embed me"}`))
	emb.Header.Set("X-Api-Key", keyA)
	emb.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(emb); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("embeddings: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 0, Messages: userText("hi")}); err == nil {
		t.Fatal("max_tokens 0: no error")
	}
	for _, path := range []string{"/v1/cache?model=backup&user=hello", "/v1/layer/negotiate?model=backup", "/v1/nope", "/v1/responses/resp_none"} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("X-Api-Key", keyA)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	b := anthropicClient(base, option.WithAPIKey(keyB), option.WithMaxRetries(0))
	for range 2 {
		b.Messages.New(ctx, anthropic.MessageNewParams{Model: "backup", MaxTokens: 3, Messages: userText("hi")}) //nolint:errcheck // the second is refused
	}
	// A scrape, as Prometheus would, so the families collected at scrape time are there too.
	if status, _, _ := get(t, base+"/metrics"); status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "layer0_") {
			continue
		}
		f := family{labels: map[string]map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if f.labels[l.GetName()] == nil {
					f.labels[l.GetName()] = map[string]bool{}
				}
				f.labels[l.GetName()][l.GetValue()] = true
			}
		}
		out[mf.GetName()] = f
	}
	return out
}

// docMetric is one metric of docs/operations.md's table: its labels, and the values documented
// for the labels that list them ("`reason`: `rate_limit`, …").
type docMetric struct {
	labels []string
	values map[string][]string
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	parens     = regexp.MustCompile(`\([^()]*\)`)
)

// docMetrics parses the metrics table of docs/operations.md.
func docMetrics(t *testing.T) map[string]docMetric {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/operations.md has no Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]docMetric{}
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "| `layer0_") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 3 {
			t.Fatalf("metrics row with %d cells: %q", len(cells), line)
		}
		var d docMetric
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			d.labels = append(d.labels, m[1])
		}
		meaning := parens.ReplaceAllString(cells[2], "")
		d.values = map[string][]string{}
		for _, l := range d.labels {
			loc := regexp.MustCompile("`" + l + "`\\s*:").FindStringIndex(meaning)
			if loc == nil {
				continue
			}
			span := meaning[loc[1]:]
			if i := strings.Index(span, ". "); i >= 0 {
				span = span[:i]
			}
			for _, m := range backticked.FindAllStringSubmatch(span, -1) {
				d.values[l] = append(d.values[l], m[1])
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			out[m[1]] = d
		}
	}
	return out
}

func keys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// The metrics table of docs/operations.md and the registry agree: the same metric names, each
// with the same labels; for every label the table enumerates (outcome, route, kind, reason,
// result) no value outside the table is ever exported, and the sets the gateway creates whole
// (outcome, route, kind, reason) are exactly the table's.
func TestMetricsMatchDocs(t *testing.T) {
	fams := servedRegistry(t)
	docs := docMetrics(t)
	// Registered only with store.kind redis, which needs a Redis (TestGatewayRedis* serve it), and
	// exported only for replicas whose prefix index is precise (TestPrefixPrecise* serve them).
	// The admission queue's are exported once admission gates a model (TestAdmission* serve them).
	onlyWith := map[string]bool{"layer0_store_errors_total": true, "layer0_engine_prefix_precise": true,
		"layer0_admission_queue_depth": true, "layer0_admission_in_flight": true, "layer0_admission_wait_seconds": true,
		"layer0_admission_shed_total": true, "layer0_admission_requests_total": true}
	for name, f := range fams {
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s is exported but not in docs/operations.md", name)
			continue
		}
		got := slices.Sorted(maps.Keys(f.labels))
		want := slices.Sorted(slices.Values(d.labels))
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, documented %v", name, got, want)
		}
		for l, documented := range d.values {
			for v := range f.labels[l] {
				if !slices.Contains(documented, v) {
					t.Errorf("%s{%s=%q} is exported but not documented (documented: %v)", name, l, v, documented)
				}
			}
			if l != "result" { // the cache's results appear as they happen
				for _, v := range documented {
					if !f.labels[l][v] {
						t.Errorf("%s{%s=%q} is documented but never exported (exported: %v)", name, l, v, keys(f.labels[l]))
					}
				}
			}
		}
	}
	for name := range docs {
		if _, ok := fams[name]; !ok && !onlyWith[name] {
			t.Errorf("%s is documented but not exported", name)
		}
	}
	for _, l := range []string{"outcome", "route", "kind", "reason", "result"} {
		found := false
		for _, d := range docs {
			found = found || len(d.values[l]) > 0
		}
		if !found {
			t.Errorf("the table enumerates no values of %q: the parser or the table changed", l)
		}
	}
}
