package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// buildLayer0 builds the layer0 command into a temporary directory and returns its path: the
// tests below run it as separate processes, to kill one, or to read its memory alone.
func buildLayer0(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "layer0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/layer0").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/layer0: %v\n%s", err, out)
	}
	return bin
}

// layer0Process is one `layer0 serve` started by a test.
type layer0Process struct {
	cmd  *exec.Cmd
	base string // http://HOST:PORT, as it printed it
}

// startLayer0 runs `bin serve` with config on a free loopback port and waits until it listens.
// The process is killed (by its PID) when the test ends, if it still runs.
func startLayer0(t *testing.T, bin, config string) *layer0Process {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layer0.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--config", path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &layer0Process{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "layer0 listening on "); ok {
				a, _, _ := strings.Cut(rest, " ")
				addr <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-addr:
		p.base = a
	case <-time.After(60 * time.Second):
		t.Fatalf("layer0 serve did not listen within 60s; stderr:\n%s", stderr.String())
	}
	return p
}

// kill stops the process with SIGKILL and reaps it; a no-op once done.
func (p *layer0Process) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// openStream starts a streamed message with key and returns the response once its first event
// has arrived (the request holds its concurrency slot), or the status of a refusal (resp nil).
func openStream(ctx context.Context, base, key, text string) (*http.Response, int, error) {
	body := fmt.Sprintf(`{"model":"m","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":%q}]}`, text)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := streamClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, resp.StatusCode, nil
	}
	var b [1]byte
	if _, err := io.ReadFull(resp.Body, b[:]); err != nil {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("first byte of the stream: %w", err)
	}
	return resp, http.StatusOK, nil
}

var streamClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, MaxConnsPerHost: 0}}

// longText is a user message the sim in echo mode streams back for a long time.
var longText = strings.Repeat("the slow stream goes on ", 400)

// TestReplicaSIGKILLReturnsSlots: three layer0 processes on one Redis, a key limited to 10
// concurrent streams. Five long streams are opened through one process and five through the
// others; an 11th is refused. The first process is killed with SIGKILL (no chance to release):
// its five slots stay taken until its lease expires — never more than 10 streams open across the
// replicas — and then come back, within the lease TTL.
func TestReplicaSIGKILLReturnsSlots(t *testing.T) {
	srv := redistest.Start(t)
	bin := buildLayer0(t)
	const ttl = 2 * time.Second
	config := fmt.Sprintf(`
store: {kind: redis, url: %q, timeout: 2s, lease_ttl: %s}
keys:
  - {name: a, hash: %s, limits: {concurrent: 10}}
engines:
  sim: {kind: sim, sim: {mode: echo, inter_token_latency: 100ms}}
models:
  m: {engines: [sim]}
`, srv.URL(), ttl, authHash("l0-kill"))
	procs := make([]*layer0Process, 3)
	for i := range procs {
		procs[i] = startLayer0(t, bin, config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var open atomic.Int64 // streams the test holds open, across the replicas
	var peak atomic.Int64
	var held []*http.Response
	var mu sync.Mutex
	take := func(base string) int {
		t.Helper()
		resp, code, err := openStream(ctx, base, "l0-kill", longText)
		if err != nil {
			t.Fatalf("stream through %s: %v", base, err)
		}
		if code == http.StatusOK {
			n := open.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			mu.Lock()
			held = append(held, resp)
			mu.Unlock()
		}
		return code
	}
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	for i := range 10 {
		base := procs[0].base
		if i >= 5 {
			base = procs[1+i%2].base
		}
		if code := take(base); code != http.StatusOK {
			t.Fatalf("stream %d of 10: %d", i, code)
		}
	}
	for _, p := range procs {
		if code := take(p.base); code != http.StatusTooManyRequests {
			t.Fatalf("an 11th stream through %s: %d, want 429", p.base, code)
		}
	}

	start := time.Now()
	procs[0].kill()
	killed := time.Since(start)
	open.Add(-5) // its five streams ended with it, for the client; not for Redis until the lease ends
	// Right after the kill the five slots are still taken: a new stream is refused.
	if code := take(procs[1].base); code != http.StatusTooManyRequests {
		t.Fatalf("a stream right after the SIGKILL: %d, want 429 (the dead replica's lease holds)", code)
	}
	back := 0
	var firstBack time.Duration
	deadline := start.Add(ttl + 8*time.Second) // the lease TTL, and room for a starved machine
	for back < 5 && time.Now().Before(deadline) {
		switch code := take(procs[1+back%2].base); code {
		case http.StatusOK:
			if back == 0 {
				firstBack = time.Since(start)
			}
			back++
		case http.StatusTooManyRequests:
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("a stream after the SIGKILL: %d", code)
		}
	}
	took := time.Since(start)
	if back != 5 {
		t.Fatalf("%d of the dead replica's 5 slots came back within %v (lease TTL %v)", back, took, ttl)
	}
	if code := take(procs[2].base); code != http.StatusTooManyRequests {
		t.Errorf("an 11th stream after the slots came back: %d, want 429", code)
	}
	if p := peak.Load(); p > 10 {
		t.Errorf("%d streams open at once across the replicas, the limit is 10", p)
	}
	// The slots come back when the lease expires: at most ttl after the kill (its last renewal
	// was at most ttl/3 before). Allow the time the kill itself and a loaded machine take.
	if firstBack > ttl+killed+2*time.Second {
		t.Errorf("the first slot came back %v after the SIGKILL, the lease TTL is %v", firstBack, ttl)
	}
	t.Logf("SIGKILL: first slot back after %v, all 5 after %v (lease TTL %v); peak open %d", firstBack, took, ttl, peak.Load())
}

// rssBytes reads a process's resident set from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read the resident set from: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestMemoryPerOpenStream measures what one open SSE stream costs the gateway: a layer0 process
// in front of another (the engine, the sim in echo mode streaming slowly), its resident set
// before and with N streams open (LAYER0_STREAMS, default 500; docs/scaling.md's number is from
// 2000). The number sizes the Helm chart's memory request (deploy/helm/layer0/values.yaml). It
// asserts only a loose ceiling, so it fails if a stream's cost grows by an order of magnitude.
func TestMemoryPerOpenStream(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of streams; not in -short")
	}
	n := 500
	if s := os.Getenv("LAYER0_STREAMS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("LAYER0_STREAMS=%q", s)
		}
	}
	bin := buildLayer0(t)
	engine := startLayer0(t, bin, `
engines:
  sim: {kind: sim, sim: {mode: echo, inter_token_latency: 200ms, max_concurrency: 10000, max_queue: 10000}}
models:
  m: {engines: [sim]}
`)
	gw := startLayer0(t, bin, fmt.Sprintf(`
keys:
  - {name: a, hash: %s}
engines:
  peer: {kind: layer0, url: %q}
models:
  m: {engines: [peer]}
`, authHash("l0-mem"), engine.base))
	base := gw.base
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Warm up: the pools, the first stream's buffers, so the baseline is a serving process.
	for range 20 {
		resp, code, err := openStream(ctx, base, "l0-mem", "warm")
		if err != nil || code != http.StatusOK {
			t.Fatalf("warm-up stream: %d %v", code, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	time.Sleep(time.Second)
	before := rssBytes(t, gw.cmd.Process.Pid)
	var mu sync.Mutex
	var held []*http.Response
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	var wg sync.WaitGroup
	var failed atomic.Int64
	sem := make(chan struct{}, 64)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, code, err := openStream(ctx, base, "l0-mem", longText)
			if err != nil || code != http.StatusOK {
				if failed.Add(1) == 1 {
					t.Errorf("stream: %d %v", code, err)
				}
				return
			}
			mu.Lock()
			held = append(held, resp)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d streams failed to open", failed.Load(), n)
	}
	time.Sleep(time.Second) // let the streams settle into their steady state
	with := rssBytes(t, gw.cmd.Process.Pid)
	per := (with - before) / int64(n)
	t.Logf("layer0 resident set: %.1f MiB serving, %.1f MiB with %d open streams: %.1f KiB per stream",
		float64(before)/(1<<20), float64(with)/(1<<20), n, float64(per)/1024)
	if per <= 0 || per > 1<<20 {
		t.Errorf("%d bytes per open stream: outside (0, 1 MiB]", per)
	}
}

// SIGINT stops `layer0 serve` with a word: it says it is stopping (and why) as the signal
// arrives, then that it stopped, and exits 0.
func TestServeSaysItStops(t *testing.T) {
	bin := buildLayer0(t)
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stdout.String(), "layer0 listening on ") {
		if time.Now().After(deadline) {
			t.Fatalf("not listening after 60s; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after SIGINT")
	}
	out := stdout.String()
	stopping := strings.Index(out, "layer0 stopping (interrupt signal received): requests in flight have up to 30s to finish\n")
	stopped := strings.Index(out, "layer0 stopped\n")
	if stopping < 0 || stopped < stopping {
		t.Errorf("stdout does not say it is stopping, then stopped:\n%s", out)
	}
}
