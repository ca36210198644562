package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/llm"
)

// The performance targets on the 2-core machine.
const (
	targetAddedP50       = 50 * time.Microsecond
	targetAddedP99       = 250 * time.Microsecond
	targetAddedRate      = 2000
	targetJSONShare      = 0.55
	targetStreamShare    = 0.50
	targetStreamGain     = time.Millisecond
	targetStreamsRSS     = 1 << 30
	streamTokens         = 100
	benchModel           = "bench"
	benchSlowModel       = "bench-slow"
	slowTokens           = 25                     // tokens of each held-open stream
	slowInterTokenDelay  = 400 * time.Millisecond // so each stream lasts about 10s
	streamsSendingPeriod = 4 * time.Second
)

// scenario is one kind of traffic measured directly and through layer0.
type scenario struct {
	Name   string
	format llm.Format
	stream bool
	rates  []float64
}

// pair is one load measured on both targets.
type pair struct {
	Rate   float64       `json:"rate,omitempty"` // 0: saturation (closed loop)
	Direct *bench.Report `json:"direct"`
	Layer0 *bench.Report `json:"layer0"`
	// DirectCPU and Layer0CPU are the CPU time each process used per request during the
	// saturation runs (nil for fixed rates, or where /proc cannot tell).
	DirectCPU *cpuUse `json:"direct_cpu,omitempty"`
	Layer0CPU *cpuUse `json:"layer0_cpu,omitempty"`
	// Proxy is the same load through the bare proxy (bench/proxy.go), where measured, and
	// ProxyCPU its CPU per request (the proxy's in Layer0).
	Proxy    *bench.Report `json:"bare_proxy,omitempty"`
	ProxyCPU *cpuUse       `json:"bare_proxy_cpu,omitempty"`
}

// cpuUse is the CPU time (user and system) each process used during a run, per completed
// request. On a machine where other work runs, it moves much less than throughput does.
type cpuUse struct {
	Generator time.Duration `json:"generator_ns_per_request"`
	Upstream  time.Duration `json:"upstream_ns_per_request"`
	Layer0    time.Duration `json:"layer0_ns_per_request,omitempty"`
}

// budget is the CPU layer0 may use per request for its throughput to reach share of the direct
// one when the machine is all the three processes': at the direct rate D the generator and the
// upstream use all of it, c = cores/D per request; at share·D each request may cost
// cores/(share·D) in all, so layer0's part is c·(1/share − 1).
func (p pair) budget(share float64) time.Duration {
	if p.DirectCPU == nil {
		return 0
	}
	c := p.DirectCPU.Generator + p.DirectCPU.Upstream
	return time.Duration(float64(c) * (1/share - 1))
}

// cpuMeter reads the CPU time of the processes of a run.
type cpuMeter struct {
	up, gw *child // gw is nil for a direct run
}

// cpuSample is what a cpuMeter read at one moment.
type cpuSample struct{ self, up, gw time.Duration }

func (m cpuMeter) read() (cpuSample, error) {
	var s cpuSample
	var err error
	if s.self, err = procCPU("/proc/self/stat"); err != nil {
		return s, err
	}
	if s.up, err = m.up.cpu(); err != nil {
		return s, err
	}
	if m.gw != nil {
		s.gw, err = m.gw.cpu()
	}
	return s, err
}

// cpuSpan is what a cpuMeter read before and after a run; ok is false when a reading failed.
type cpuSpan struct {
	before, after cpuSample
	ok            bool
}

// run runs the load cfg between two readings of the processes' CPU time.
func (m cpuMeter) run(ctx context.Context, cfg bench.Config) (*bench.Report, cpuSpan, error) {
	before, errBefore := m.read()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return nil, cpuSpan{}, err
	}
	after, errAfter := m.read()
	return rep, cpuSpan{before, after, errBefore == nil && errAfter == nil}, nil
}

// per is the CPU each process used per request over a run of n requests: nil when a reading
// failed or no request counted.
func (s cpuSpan) per(n uint64) *cpuUse {
	if !s.ok || n == 0 {
		return nil
	}
	a, b := s.before, s.after
	per := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	return &cpuUse{Generator: per(b.self - a.self), Upstream: per(b.up - a.up), Layer0: per(b.gw - a.gw)}
}

// added is layer0's added latency at quantile p50 or p99 (negative when noise wins).
func (p pair) added(p99 bool) time.Duration {
	if p99 {
		return p.Layer0.Latency.P99 - p.Direct.Latency.P99
	}
	return p.Layer0.Latency.P50 - p.Direct.Latency.P50
}

// share is layer0's throughput as a fraction of the direct throughput.
func (p pair) share() float64 {
	if p.Direct.Throughput == 0 {
		return 0
	}
	return p.Layer0.Throughput / p.Direct.Throughput
}

// scenarioResult is a scenario's measurements.
type scenarioResult struct {
	Name       string `json:"name"`
	Fixed      []pair `json:"fixed_rates"`
	Saturation pair   `json:"saturation"`
	// Profile is the top of layer0's CPU profile during the saturation run.
	Profile     string `json:"profile,omitempty"`
	ProfileFile string `json:"profile_file,omitempty"`
}

// streamsResult is the memory test's outcome.
type streamsResult struct {
	Want    int           `json:"want"`
	Report  *bench.Report `json:"report"`
	PeakRSS int64         `json:"peak_rss_bytes"`
	IdleRSS int64         `json:"idle_rss_bytes"`
}

// result is everything report.json holds.
type result struct {
	Started    time.Time        `json:"started"`
	Machine    string           `json:"machine"`
	LoadBefore string           `json:"load_avg_before"`
	LoadAfter  string           `json:"load_avg_after"`
	Engine     string           `json:"engine"`
	HTTP1      string           `json:"http1"`
	Scenarios  []scenarioResult `json:"scenarios"`
	OneConn    []oneConnResult  `json:"one_connection,omitempty"`
	Streams    *streamsResult   `json:"streams,omitempty"`
	Protocols  []protocolResult `json:"protocols,omitempty"`
}

// report runs everything and writes the report to w.
func report(ctx context.Context, o options, w io.Writer) error {
	res := result{Started: time.Now().UTC(), Machine: machine(), LoadBefore: loadAvg(), HTTP1: o.http1}
	logf("logs, profiles and report.json go to %s", o.out)

	up, err := startChild(o.out, "upstream", childUpstream, "--tokens", fmt.Sprint(streamTokens))
	if err != nil {
		return err
	}
	defer up.stop()
	upURL := "http://" + up.fields[0]
	var slowURL string
	if o.streams > 0 {
		slow, err := startChild(o.out, "upstream-slow", childUpstream, "--tokens", fmt.Sprint(slowTokens),
			"--itl", slowInterTokenDelay.String())
		if err != nil {
			return err
		}
		defer slow.stop()
		slowURL = "http://" + slow.fields[0]
	}
	var cert tlsFiles
	if o.protocols {
		if cert, err = writeCert(o.out); err != nil {
			return err
		}
	}
	gw, engineNote, err := startGateway(o, upURL, slowURL, cert)
	if err != nil {
		return err
	}
	defer gw.stop()
	res.Engine = engineNote
	gwURL, pprofAddr := "http://"+gw.fields[0], gw.fields[1]
	if err := waitReady(ctx, gwURL); err != nil {
		return err
	}
	var proxy *child
	if o.proxy {
		if proxy, err = startChild(o.out, "bare-proxy", childProxy, "--upstream", up.fields[0], "--http1", o.http1); err != nil {
			return err
		}
		defer proxy.stop()
	}

	for _, sc := range []scenario{
		{"non-streaming, Anthropic JSON", llm.FormatAnthropic, false, o.rates},
		{"streaming 100 tokens, Anthropic SSE", llm.FormatAnthropic, true, o.streamRates},
		{"streaming 100 tokens, binary v1", llm.FormatBinary, true, o.streamRates},
	} {
		r, err := runScenario(ctx, o, sc, upURL, gwURL, pprofAddr, up, gw, proxy)
		if err != nil {
			return err
		}
		res.Scenarios = append(res.Scenarios, r)
	}
	if o.oneConn {
		if res.OneConn, err = runOneConn(ctx, o, upURL, gwURL, up, gw, proxy); err != nil {
			return err
		}
	}
	if o.streams > 0 {
		if res.Streams, err = runStreams(ctx, o, gwURL, gw); err != nil {
			return err
		}
	}
	if o.protocols {
		if len(gw.fields) < 3 {
			return fmt.Errorf("layer0 started without its TLS listener (ready %v)", gw.fields)
		}
		if res.Protocols, err = runProtocols(ctx, o, gwURL, "https://"+gw.fields[2], up, gw); err != nil {
			return err
		}
	}

	res.LoadAfter = loadAvg()
	printReport(w, o, &res)
	if err := writeJSON(filepath.Join(o.out, "report.json"), &res); err != nil {
		return err
	}
	if o.gobench != "" {
		goBench(ctx, w, o)
	}
	fmt.Fprintf(w, "\nraw results: %s\n", filepath.Join(o.out, "report.json"))
	return nil
}

// startGateway starts layer0 with the upstream as its engine, or the sim where this build has no
// such engine.
func startGateway(o options, upURL, slowURL string, cert tlsFiles) (*child, string, error) {
	kinds := []string{o.engine}
	if o.engine != "sim" {
		kinds = append(kinds, "sim")
	}
	var firstErr error
	for _, kind := range kinds {
		path := filepath.Join(o.out, "layer0-"+kind+".yaml")
		if err := os.WriteFile(path, []byte(gatewayConfig(kind, upURL, slowURL, cert, o.http1)), 0o644); err != nil {
			return nil, "", err
		}
		gw, err := startChild(o.out, "layer0-"+kind, childGateway, "--config", path,
			"--access-log", filepath.Join(o.out, "access-"+kind+".log"))
		if err == nil {
			note := fmt.Sprintf("layer0 reaches the upstream as an %q engine (config %s)", kind, path)
			if kind == "sim" {
				note = "layer0 runs its embedded sim engine (zero delays), which stands in for the upstream"
				if firstErr != nil {
					note += fmt.Sprintf(" because the %q engine failed: %v", o.engine, firstErr)
				}
			}
			return gw, note, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		logf("layer0 with a %s engine: %v", kind, err)
	}
	return nil, "", firstErr
}

// gatewayConfig is the YAML configuration of the gateway child: model "bench" on the fast
// upstream, "bench-slow" on the paced one (when given), and with a certificate a TLS listener
// with HTTP/3 on its port.
func gatewayConfig(kind, upURL, slowURL string, cert tlsFiles, http1 string) string {
	engine := func(name, url string, itl time.Duration) string {
		if kind == "sim" {
			return fmt.Sprintf("  %s:\n    kind: sim\n    sim:\n      inter_token_latency: %s\n"+
				"      max_concurrency: 20000\n      max_queue: 20000\n", name, itl)
		}
		return fmt.Sprintf("  %s:\n    kind: %s\n    url: %s\n", name, kind, url)
	}
	var b strings.Builder
	b.WriteString("# Written by bench (make bench).\nengines:\n")
	b.WriteString(engine("upstream", upURL, 0))
	if slowURL != "" {
		b.WriteString(engine("upstream-slow", slowURL, slowInterTokenDelay))
	}
	fmt.Fprintf(&b, "models:\n  %s:\n    engines: [upstream]\n", benchModel)
	if slowURL != "" {
		fmt.Fprintf(&b, "  %s:\n    engines: [upstream-slow]\n", benchSlowModel)
	}
	b.WriteString("log:\n  level: warn\n")
	if http1 != "" || cert.cert != "" {
		b.WriteString("server:\n")
	}
	if http1 != "" {
		fmt.Fprintf(&b, "  http1: %s\n", http1)
	}
	if cert.cert != "" {
		fmt.Fprintf(&b, "  http3: true\n  tls: {cert_file: %q, key_file: %q}\n", cert.cert, cert.key)
	}
	return b.String()
}

// waitReady sends single requests until the gateway answers one, for at most 20 seconds.
func waitReady(ctx context.Context, url string) error {
	var last string
	for range 80 {
		rep, err := bench.Run(ctx, bench.Config{URL: url, Model: benchModel, Requests: 1, Timeout: 5 * time.Second})
		if err != nil {
			return err
		}
		if rep.OK == 1 {
			return nil
		}
		last = fmt.Sprint(rep.Errors, rep.ErrorSamples)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("layer0 did not answer a request within 20s: %s", last)
}

// load is one measurement's load: sc against url for d, at rate (0: closed loop over o.conns
// connections).
func load(o options, sc scenario, url string, rate float64, d time.Duration) bench.Config {
	cfg := bench.Config{URL: url, Format: sc.format, Stream: sc.stream, Model: benchModel,
		MaxTokens: streamTokens, Duration: d, Timeout: 10 * time.Second, MaxInFlight: 4000}
	if rate > 0 {
		cfg.Rate = rate
	} else {
		cfg.Connections = o.conns
	}
	return cfg
}

// runScenario measures a scenario at each fixed rate and at saturation, profiling layer0 during
// its saturation run.
func runScenario(ctx context.Context, o options, sc scenario, upURL, gwURL, pprofAddr string, up, gw, proxy *child) (scenarioResult, error) {
	r := scenarioResult{Name: sc.Name}
	urls := []string{upURL, gwURL}
	if proxy != nil {
		urls = append(urls, "http://"+proxy.fields[0])
	}
	for _, url := range urls {
		if _, err := bench.Run(ctx, load(o, sc, url, 0, o.warmup)); err != nil {
			return r, err
		}
	}
	for _, rate := range slices.Concat(sc.rates, []float64{0}) { // 0: saturation
		var p pair
		var cpu cpuSpan
		var err error
		logf("%s: %s direct", sc.Name, rateName(rate))
		if p.Direct, cpu, err = (cpuMeter{up: up}).run(ctx, load(o, sc, upURL, rate, o.duration)); err != nil {
			return r, err
		}
		if rate == 0 {
			p.DirectCPU = cpu.per(p.Direct.OK)
		}
		var prof chan profile
		if rate == 0 {
			prof = make(chan profile, 1)
			file := filepath.Join(o.out, "cpu-"+slug(sc.Name)+".pprof")
			go func() { prof <- fetchProfile(ctx, pprofAddr, file, o.duration-time.Second) }()
		}
		logf("%s: %s through layer0", sc.Name, rateName(rate))
		if p.Layer0, cpu, err = (cpuMeter{up: up, gw: gw}).run(ctx, load(o, sc, gwURL, rate, o.duration)); err != nil {
			return r, err
		}
		if rate == 0 {
			p.Layer0CPU = cpu.per(p.Layer0.OK)
		}
		if proxy != nil && (rate == 0 || rate == targetAddedRate && !sc.stream) {
			logf("%s: %s through the bare proxy", sc.Name, rateName(rate))
			proxyURL := "http://" + proxy.fields[0]
			if p.Proxy, cpu, err = (cpuMeter{up: up, gw: proxy}).run(ctx, load(o, sc, proxyURL, rate, o.duration)); err != nil {
				return r, err
			}
			if rate == 0 {
				p.ProxyCPU = cpu.per(p.Proxy.OK)
			}
		}
		if rate > 0 {
			p.Rate = rate
			r.Fixed = append(r.Fixed, p)
			continue
		}
		r.Saturation = p
		pr := listTop(ctx, <-prof)
		r.Profile, r.ProfileFile = pr.top, pr.file
		if pr.err != nil {
			r.Profile = "no profile: " + pr.err.Error()
		}
	}
	return r, ctx.Err()
}

// profile is a fetched CPU profile and the top of its listing.
type profile struct {
	file, top string
	err       error
}

// fetchProfile records a child's CPU profile for d into file.
func fetchProfile(ctx context.Context, addr, file string, d time.Duration) profile {
	secs := max(1, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return profile{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return profile{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("pprof: %s: %s", resp.Status, b)
	}
	if err != nil {
		return profile{err: err}
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return profile{err: err}
	}
	return profile{file: file}
}

// listTop lists the top functions of a fetched profile. It runs go tool pprof, so it is called
// once the load it profiled has ended: while a run is measured it would take the run's CPU.
func listTop(ctx context.Context, pr profile) profile {
	if pr.err != nil {
		return pr
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", pr.file).Output()
	if err != nil {
		return profile{file: pr.file, err: fmt.Errorf("go tool pprof: %w", err)}
	}
	return profile{file: pr.file, top: string(out)}
}

// runStreams holds o.streams streams open through layer0 at once (over h2c, so that the file
// descriptors of one process suffice) and samples the gateway's memory. Each stream has
// slowTokens tokens slowInterTokenDelay apart (about 10s); all are started within
// streamsSendingPeriod, so all are open together at its end.
func runStreams(ctx context.Context, o options, gwURL string, gw *child) (*streamsResult, error) {
	sr := &streamsResult{Want: o.streams}
	var err error
	if sr.IdleRSS, _, err = gw.rss(); err != nil {
		return nil, err
	}
	logf("holding %d concurrent streams through layer0", o.streams)
	done := make(chan struct{})
	peak := make(chan int64, 1)
	go func() { peak <- sampleRSS(gw, done) }()
	sr.Report, err = bench.Run(ctx, bench.Config{
		URL: gwURL, Format: llm.FormatAnthropic, Stream: true, Model: benchSlowModel, MaxTokens: slowTokens,
		HTTP2: true, H2Conns: o.streams/500 + 1,
		Rate: float64(o.streams) / streamsSendingPeriod.Seconds(), Duration: streamsSendingPeriod,
		MaxInFlight: o.streams + 1000, Timeout: time.Minute,
	})
	close(done)
	sr.PeakRSS = <-peak
	return sr, err
}

// sampleRSS returns the largest resident size of c seen every 100ms until done.
func sampleRSS(c *child, done <-chan struct{}) int64 {
	var peak int64
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if now, _, err := c.rss(); err == nil {
			peak = max(peak, now)
		}
		select {
		case <-done:
			return peak
		case <-t.C:
		}
	}
}

// goBench runs the hot paths' benchmarks and copies their result lines.
func goBench(ctx context.Context, w io.Writer, o options) {
	fmt.Fprintf(w, "\n== go test -bench (hot paths, allocations) ==\n")
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", o.benchtime},
		strings.Fields(strings.ReplaceAll(o.gobench, ",", " "))...)
	logf("go %s", strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "pkg:") || strings.HasPrefix(l, "FAIL") ||
			strings.HasPrefix(l, "---") {
			fmt.Fprintln(w, l)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "go test -bench failed: %v\n", err)
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// machine describes the machine the report ran on.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = " " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d cores (%s), %s%s, %s", runtime.NumCPU(), model, runtime.GOOS, kernel, runtime.Version())
}

// loadAvg is the 1, 5 and 15-minute load averages (Linux), or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func rateName(rate float64) string {
	if rate == 0 {
		return "saturation"
	}
	return fmt.Sprintf("%g req/s", rate)
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
}
