package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/config"
)

func TestParseRates(t *testing.T) {
	tests := []struct {
		in      string
		want    []float64
		wantErr bool
	}{
		{"500,1000, 2000", []float64{500, 1000, 2000}, false},
		{"2.5", []float64{2.5}, false},
		{"", nil, true},
		{"100,-1", nil, true},
		{"fast", nil, true},
	}
	for _, tt := range tests {
		got, err := parseRates(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseRates(%q): got error %v, want error %v", tt.in, err, tt.wantErr)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseRates(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// TestGatewayConfigIsValid checks the generated configuration against the real loader.
func TestGatewayConfigIsValid(t *testing.T) {
	for _, kind := range []string{"sim", "anthropic", "openai"} {
		for _, slow := range []string{"", "http://127.0.0.1:2"} {
			cert := tlsFiles{}
			if slow != "" {
				cert = tlsFiles{cert: "/tmp/c.pem", key: "/tmp/k.pem"}
			}
			c, err := config.Parse([]byte(gatewayConfig(kind, "http://127.0.0.1:1", slow, cert, "net/http")))
			if err != nil {
				t.Errorf("kind %s, slow %q: %v", kind, slow, err)
				continue
			}
			want := []string{benchModel}
			if slow != "" {
				want = append(want, benchSlowModel)
			}
			for _, m := range want {
				if _, ok := c.Models[m]; !ok {
					t.Errorf("kind %s: model %q missing", kind, m)
				}
			}
			if got := c.Server.TLS.CertFile; got != cert.cert || c.Server.HTTP3 != (cert.cert != "") {
				t.Errorf("TLS certificate %q, HTTP/3 %v; want %q and HTTP/3 with it", got, c.Server.HTTP3, cert.cert)
			}
			if got := c.Engines["upstream"].Kind; got != kind {
				t.Errorf("engine kind: got %q, want %q", got, kind)
			}
		}
	}
}

func TestPrintReportChecksTargets(t *testing.T) {
	rep := func(ok, failed uint64, tput float64, p50, p99 time.Duration) *bench.Report {
		return &bench.Report{Mode: "open", Outcome: bench.Outcome{Sent: ok + failed, OK: ok, Failed: failed,
			Errors: map[string]uint64{"status_400": failed}, ErrorSamples: map[string]string{"status_400": "bad"}},
			Throughput: tput, Latency: bench.Percentiles{P50: p50, P99: p99}}
	}
	us := time.Microsecond
	res := &result{
		Machine: "test machine", Engine: "test engine", LoadBefore: "1 1 1", LoadAfter: "2 2 2",
		Scenarios: []scenarioResult{
			{Name: "non-streaming", Fixed: []pair{
				{Rate: 1000, Direct: rep(100, 0, 0, 100*us, 200*us), Layer0: rep(100, 0, 0, 500*us, 900*us)},
				{Rate: 2000, Direct: rep(100, 0, 0, 100*us, 200*us), Layer0: rep(100, 0, 0, 140*us, 400*us)},
			}, Saturation: pair{Direct: rep(100, 0, 1000, 0, 0), Layer0: rep(100, 0, 600, 0, 0)}},
			{Name: "streaming", Fixed: []pair{
				{Rate: 250, Direct: rep(100, 0, 0, time.Millisecond, 0), Layer0: rep(0, 100, 0, 0, 0)},
			}, Saturation: pair{Direct: rep(100, 0, 1000, 0, 0), Layer0: rep(100, 0, 400, 0, 0)}},
		},
	}
	var b strings.Builder
	printReport(&b, options{duration: time.Second, conns: 4}, res)
	out := b.String()
	for _, want := range []string{
		"[ ok ] non-streaming at 2000 req/s: layer0 adds +40µs at p50 (target ≤ 50µs) and +200µs at p99",
		"[ ok ] non-streaming maximum throughput: 60% of direct",
		"[MISS] streaming maximum throughput: 40% of direct",
		"[MISS] streaming at 250 req/s: a stream ends n/a later",
		"layer0: 100 of 100 failed, mostly status_400 (bad)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestProfileLines(t *testing.T) {
	top := "File: x\nBuild ID: y\nType: cpu\nTime: now\nDuration: 1s\n      flat  flat%\n a\n b\n c\n"
	got := profileLines(top, 2)
	want := []string{"Duration: 1s", "      flat  flat%", " a", " b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("profileLines (-want +got):\n%s", diff)
	}
}

func TestProcCPU(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, stat string
		want       time.Duration
		err        bool
	}{
		{"plain", "42 (bench) S 1 42 42 0 -1 4194304 100 0 0 0 250 31 0 0 20 0 9 0", 2810 * time.Millisecond, false},
		{"name with spaces and parentheses", "42 (a (b) c) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0", 100 * time.Millisecond, false},
		{"short", "42 (x) S 1 2", 0, true},
		{"not numbers", "42 (x) S 1 42 42 0 -1 0 0 0 0 0 u s 0 0", 0, true},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(path, []byte(tt.stat), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := procCPU(path)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("%s: got %v %v, want %v (error %v)", tt.name, got, err, tt.want, tt.err)
		}
	}
	if _, err := procCPU("/proc/self/stat"); err != nil {
		t.Errorf("this process: %v", err)
	}
}

func TestBudget(t *testing.T) {
	// Generator and upstream use 18 µs per request directly: at 55% of that rate layer0 may use
	// 18·(1/0.55 − 1) ≈ 14.7 µs; at 50%, 18 µs.
	p := pair{DirectCPU: &cpuUse{Generator: 8 * time.Microsecond, Upstream: 10 * time.Microsecond}}
	for _, tt := range []struct {
		share float64
		want  time.Duration
	}{{0.55, 14727 * time.Nanosecond}, {0.5, 18 * time.Microsecond}} {
		if got := p.budget(tt.share); (got - tt.want).Abs() > time.Microsecond/100 {
			t.Errorf("budget(%v): got %v, want %v", tt.share, got, tt.want)
		}
	}
	if got := (pair{}).budget(0.5); got != 0 {
		t.Errorf("budget without measurements: got %v, want 0", got)
	}
}

// TestProtocolComparison checks the protocol section's medians and the HTTP/3 target: the ratio
// is taken within each round (HTTP/2 and HTTP/3 ran next to each other) and its median judged.
func TestProtocolComparison(t *testing.T) {
	ms := time.Millisecond
	rep := func(http string, p50, p99 time.Duration, failed uint64) *bench.Report {
		return &bench.Report{HTTP: http, Outcome: bench.Outcome{Sent: 100, OK: 100 - failed, Failed: failed}, Tokens: 100 * 100,
			TTFT: bench.Percentiles{P50: p50, P99: p99}, Latency: bench.Percentiles{P50: p50 + ms},
			Wire: bench.Wire{Sent: 100 * 300, Received: 100 * 13000}}
	}
	run := func(name, http string, reps ...*bench.Report) *protocolRun {
		return &protocolRun{Protocol: name, HTTP: http, Rounds: reps,
			CPU: []*cpuUse{{Generator: ms, Layer0: 2 * ms}, nil, {Generator: 3 * ms, Layer0: 4 * ms}}}
	}
	// Round 2 ran while the machine was busy: both protocols slowed down together.
	res := protocolResult{Name: "sse", Rate: 100, Runs: []*protocolRun{
		run("HTTP/1.1 cleartext", "1.1", rep("1.1", ms, 5*ms, 0), rep("1.1", 9*ms, 50*ms, 0), rep("1.1", ms, 5*ms, 0)),
		run("HTTP/2 TLS", "2", rep("2", 2*ms, 10*ms, 0), rep("2", 20*ms, 100*ms, 0), rep("2", 2*ms, 10*ms, 0)),
		run("HTTP/3 QUIC", "3", rep("3", 2100*time.Microsecond, 12*ms, 0), rep("3", 21*ms, 110*ms, 0), rep("3", 2200*time.Microsecond, 11*ms, 0)),
	}}
	if got := res.h3Ratio(false); got < 1.049 || got > 1.051 {
		t.Errorf("h3 ratio at p50: got %v, want 1.05 (the median of 1.05, 1.05, 1.10)", got)
	}
	if got := res.run("3").ttft(false); got != 2200*time.Microsecond {
		t.Errorf("h3 ttft p50: got %v, want the median round's 2.2ms", got)
	}
	if s, r, pt := res.run("2").wire(); s != 300 || r != 13000 || pt != 133 {
		t.Errorf("wire: got %v sent, %v received, %v per token; want 300, 13000, 133", s, r, pt)
	}
	if c := res.run("2").cpu(); c == nil || c.Generator != 3*ms || c.Layer0 != 4*ms {
		t.Errorf("cpu: got %+v, want the upper median of the rounds measured", c)
	}
	var b strings.Builder
	printReport(&b, options{duration: time.Second}, &result{Protocols: []protocolResult{res}})
	for _, want := range []string{
		"HTTP/3 QUIC             2.2ms",
		"HTTP/3 ÷ HTTP/2 time to first token (median of the rounds' ratios): 1.05 at p50",
		"[ ok ] sse at 100 req/s: HTTP/3's time to first token is 1.05× HTTP/2's at p50, 2.2ms against 2ms (target ≤ 1.10×)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}

	res.Runs[2].Rounds[0] = rep("3", 4*ms, 12*ms, 3)
	res.Runs[2].Rounds[2] = rep("3", 4*ms, 12*ms, 0)
	b.Reset()
	printTargets(&b, &result{Protocols: []protocolResult{res}})
	if want := "[MISS] sse at 100 req/s: HTTP/3's time to first token is 2.00× HTTP/2's at p50, 4ms against 2ms (target ≤ 1.10×) — requests failed: HTTP/2 0, HTTP/3 3"; !strings.Contains(b.String(), want) {
		t.Errorf("targets lack %q:\n%s", want, b.String())
	}
}
