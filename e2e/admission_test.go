package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// tenantLoad is one tenant's open-loop stream of streamed requests: Rate a second for the run,
// or Burst requests at once At into it.
type tenantLoad struct {
	Key   string
	Rate  float64
	Burst int
	At    time.Duration
}

// loadResult is what one tenant's requests met. Times are from each request's scheduled send.
type loadResult struct {
	mu      sync.Mutex
	ttft    []time.Duration // served requests' time to first token
	refused []time.Duration // shed requests' time to the refusal
	noRetry int             // refusals without retry-after
	failed  int             // anything else
	doneIn  int             // served requests that ended within the run's window
}

func (r *loadResult) p(q float64) time.Duration { return percentile(r.ttft, q) }

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// runLoads sends every tenant's load to base's model m for d, waits for the answers (bounded),
// and returns each tenant's result in order.
func runLoads(t *testing.T, base string, d time.Duration, loads ...tenantLoad) []*loadResult {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	start := time.Now()
	out := make([]*loadResult, len(loads))
	for i, l := range loads {
		res := &loadResult{}
		out[i] = res
		var due []time.Duration
		for range l.Burst {
			due = append(due, l.At)
		}
		if l.Rate > 0 {
			for k := 0; k < int(l.Rate*d.Seconds()); k++ {
				due = append(due, time.Duration(float64(k)/l.Rate*float64(time.Second)))
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n, at := range due {
				time.Sleep(time.Until(start.Add(at)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					sendOne(hc, base, l.Key, fmt.Sprintf("%s %d", l.Key, n), start.Add(at), start.Add(d), res)
				}()
			}
		}()
	}
	wg.Wait()
	return out
}

// sendOne sends one streamed request and records what it met.
func sendOne(hc *http.Client, base, key, prompt string, sched, window time.Time, res *loadResult) {
	body := `{"model":"m","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := hc.Do(req)
	if err != nil {
		res.mu.Lock()
		res.failed++
		res.mu.Unlock()
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == 529 {
		took := time.Since(sched)
		b, _ := io.ReadAll(resp.Body)
		res.mu.Lock()
		defer res.mu.Unlock()
		if !strings.Contains(string(b), "overloaded_error") {
			res.failed++
			return
		}
		res.refused = append(res.refused, took)
		if resp.Header.Get("Retry-After") == "" {
			res.noRetry++
		}
		return
	}
	var ttft time.Duration
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if ttft == 0 && strings.Contains(line, "content_block_delta") {
			ttft = time.Since(sched)
		}
		if err != nil {
			break
		}
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if resp.StatusCode != http.StatusOK || ttft == 0 {
		res.failed++
		return
	}
	res.ttft = append(res.ttft, ttft)
	if time.Now().Before(window) {
		res.doneIn++
	}
}

// admissionConfig is a saturated sim pool — three engines of 8 sequences, each request 200ms to
// its first token and about 203ms in all, so about 118 requests a second — behind admission
// (on or off), with tenants a and b in the standard band, i in interactive, and c in batch.
func admissionConfig(on bool) string {
	keys := ""
	for _, k := range []string{"a", "b", "i", "c"} {
		prio := map[string]string{"i": "interactive", "c": "batch"}[k]
		keys += fmt.Sprintf("  - {name: %s, hash: %s, priority: %q}\n", k, authHash("l0-adm-"+k), prio)
	}
	return `
keys:
` + strings.ReplaceAll(keys, `priority: ""`, `priority: standard`) + `
admission:
  enabled: ` + fmt.Sprint(on) + `
  bands:
    interactive: {priority: 300, max_wait: 5s}
    standard: {priority: 200, max_wait: 5s}
    batch: {priority: 100, max_wait: 20s, sheddable: true, max_share: 0.75}
engines:
  s1: {kind: sim, sim: {ttft: 200ms, inter_token_latency: 1ms, max_concurrency: 8}}
  s2: {kind: sim, sim: {ttft: 200ms, inter_token_latency: 1ms, max_concurrency: 8}}
  s3: {kind: sim, sim: {ttft: 200ms, inter_token_latency: 1ms, max_concurrency: 8}}
models:
  m: {engines: [s1, s2, s3]}
`
}

// TestAdmissionNoisyNeighbour is the noisy-neighbour benchmark: tenant a sends ten times tenant
// b's rate to a saturated pool. It prints the table docs/admission.md quotes. With admission, b's
// p99 time to first token stays within 1.5× of b's alone, a gets every slot b leaves, and a batch
// burst does not move the interactive band's p99.
func TestAdmissionNoisyNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("a benchmark of some 20s")
	}
	const d = 3 * time.Second
	rateB, rateA := 15.0, 150.0
	run := func(on bool, loads ...tenantLoad) []*loadResult {
		_, base := serveGateway(t, parseConfig(t, admissionConfig(on)))
		return runLoads(t, base, d, loads...)
	}
	a, b, i, c := "l0-adm-a", "l0-adm-b", "l0-adm-i", "l0-adm-c"
	bAlone := run(true, tenantLoad{Key: b, Rate: rateB})[0]
	aAlone := run(true, tenantLoad{Key: a, Rate: rateA})[0]
	both := run(true, tenantLoad{Key: a, Rate: rateA}, tenantLoad{Key: b, Rate: rateB})
	off := run(false, tenantLoad{Key: a, Rate: rateA}, tenantLoad{Key: b, Rate: rateB})
	iAlone := run(true, tenantLoad{Key: i, Rate: rateB})[0]
	burst := run(true, tenantLoad{Key: i, Rate: rateB}, tenantLoad{Key: c, Burst: 150, At: time.Second})

	row := func(name string, r *loadResult) string {
		return fmt.Sprintf("| %-34s | %6d | %7d | %8.0f | %8.0f | %8.0f |", name, len(r.ttft), len(r.refused),
			millis(r.p(0.5)), millis(r.p(0.99)), float64(r.doneIn)/d.Seconds())
	}
	lines := []string{
		"| run (3s each)                      | served |    shed | p50 ttft | p99 ttft | served/s |",
		"|---|---:|---:|---:|---:|---:|",
		row("b alone (15/s)", bAlone),
		row("a alone (150/s)", aAlone),
		row("b with a (admission on)", both[1]),
		row("a with b (admission on)", both[0]),
		row("b with a (admission off)", off[1]),
		row("a with b (admission off)", off[0]),
		row("interactive alone (15/s)", iAlone),
		row("interactive with a batch burst", burst[0]),
		row("batch burst (150 at once, at 1s)", burst[1]),
	}
	t.Log("noisy neighbour on a saturated sim pool (24 slots, ~203ms a request):\n" + strings.Join(lines, "\n"))

	for name, r := range map[string]*loadResult{"b alone": bAlone, "a alone": aAlone, "b with a": both[1], "a with b": both[0],
		"interactive": iAlone, "interactive with burst": burst[0], "batch": burst[1]} {
		if r.failed > 0 || r.noRetry > 0 {
			t.Errorf("%s: %d failed, %d refused without retry-after", name, r.failed, r.noRetry)
		}
	}
	if !admissionTimed {
		return
	}
	if got, limit := both[1].p(0.99), bAlone.p(0.99)*3/2; got > limit {
		t.Errorf("b's p99 ttft with a is %v, more than 1.5× alone (%v)", got, bAlone.p(0.99))
	}
	if len(both[1].refused) > 0 {
		t.Errorf("b was refused %d times with a present", len(both[1].refused))
	}
	// Work-conserving: a and b together get the throughput a alone gets.
	if together, alone := both[0].doneIn+both[1].doneIn, aAlone.doneIn; float64(together) < 0.9*float64(alone) {
		t.Errorf("a and b served %d in the window, a alone %d: capacity was left idle", together, alone)
	}
	if got, limit := burst[0].p(0.99), iAlone.p(0.99)*3/2; got > limit {
		t.Errorf("interactive p99 ttft with a batch burst is %v, more than 1.5× alone (%v)", got, iAlone.p(0.99))
	}
}

// TestAdmissionOverload sends three times a pool's capacity: no request waits past its deadline
// before being refused (most are refused on arrival, by the estimate), the served ones wait less
// than the deadline, and the queue stays within its bounds.
func TestAdmissionOverload(t *testing.T) {
	const maxWait, maxQueue = 300 * time.Millisecond, 64
	_, base := serveGateway(t, parseConfig(t, fmt.Sprintf(`
keys:
  - {name: o, hash: %s}
admission:
  enabled: true
  max_queue: %d
  bands:
    standard: {priority: 200, max_wait: %s}
engines:
  s1: {kind: sim, sim: {ttft: 100ms, inter_token_latency: 1ms, max_concurrency: 4}}
models:
  m: {engines: [s1]}
`, authHash("l0-adm-o"), maxQueue, maxWait)))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	depth := make(chan float64, 1)
	go func() { // the queue's depth, as Prometheus would see it
		peak := 0.0
		defer func() { depth <- peak }()
		for k := 0; k < 400; k++ {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			if v, ok := findMetric(t, base, "layer0_admission_queue_depth", `band="standard"`); ok {
				peak = max(peak, v)
			}
		}
	}()
	// Capacity is 4 slots of ~103ms, about 39 a second: send 120 a second.
	r := runLoads(t, base, 3*time.Second, tenantLoad{Key: "l0-adm-o", Rate: 120})[0]
	close(stop)
	peak := <-depth
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	atOnce := 0
	for _, d := range r.refused {
		if d < 50*time.Millisecond {
			atOnce++
		}
	}
	t.Logf("3× overload: %d served (p50 ttft %.0fms, p99 %.0fms), %d shed (%d within 50ms, p99 %.0fms to the refusal); queue peak %.0f of %d; heap in use %+.1f MB",
		len(r.ttft), millis(r.p(0.5)), millis(r.p(0.99)), len(r.refused), atOnce, millis(percentile(r.refused, 0.99)), peak, maxQueue,
		float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20))
	if r.failed > 0 || r.noRetry > 0 {
		t.Errorf("%d failed, %d refused without retry-after", r.failed, r.noRetry)
	}
	if peak > maxQueue {
		t.Errorf("queue depth peaked at %v, above max_queue %d", peak, maxQueue)
	}
	if !admissionTimed {
		return
	}
	if len(r.refused) < len(r.ttft) {
		t.Errorf("%d shed, %d served: at 3× capacity most should be shed", len(r.refused), len(r.ttft))
	}
	// Generous bounds for a busy machine: the deadline plus scheduling slack.
	if worst := slices.Max(r.refused); worst > maxWait+250*time.Millisecond {
		t.Errorf("a request was refused %v after it was sent, past its %v deadline", worst, maxWait)
	}
	if worst := slices.Max(r.ttft); worst > maxWait+100*time.Millisecond+400*time.Millisecond {
		t.Errorf("a served request's first token came %v after it was sent", worst)
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestAdmissionShedsInClientFormat: a request shed by admission gets its client's own overloaded
// error with retry-after — 529 overloaded_error for Anthropic clients, 503 for OpenAI's — and a
// band the key may not ask for is a 403.
func TestAdmissionShedsInClientFormat(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: k, hash: `+authHash("l0-adm-k")+`, allow_priority: [batch]}
admission:
  enabled: true
  bands:
    standard: {priority: 200, max_wait: 100ms}
    batch: {priority: 100, max_wait: 100ms, sheddable: true}
    interactive: {priority: 300, max_wait: 100ms}
engines:
  s1: {kind: sim, sim: {ttft: 3s, max_concurrency: 1}}
models:
  m: {engines: [s1]}
`))
	post := func(path, body string, header ...string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("X-Api-Key", "l0-adm-k")
		req.Header.Set("Authorization", "Bearer l0-adm-k")
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const msg = `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	// The one slot is taken for 3s.
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		post("/v1/messages", msg)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, ok := findMetric(t, base, "layer0_admission_in_flight", `model="m"`); ok && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request never took its slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	resp, body := post("/v1/messages", msg)
	if resp.StatusCode != 529 || !strings.Contains(body, `"overloaded_error"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("anthropic: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("shed after %v, past its 100ms deadline", el)
	}
	resp, body = post("/v1/chat/completions", msg)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"error"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("openai: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = post("/v1/messages", msg, "X-Layer0-Priority", "interactive")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "PRIORITY_NOT_ALLOWED") && !strings.Contains(body, "may not ask for priority") {
		t.Fatalf("priority not allowed: %d %s", resp.StatusCode, body)
	}
	if v := metricValue(t, base, "layer0_admission_shed_total", `model="m"`, `reason="deadline"`); v < 2 {
		t.Fatalf("layer0_admission_shed_total{reason=deadline} = %v, want 2", v)
	}
	<-busy
}
