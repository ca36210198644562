package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
)

// TestGatewayReloadUnderLoad reloads the configuration 100 times, alternating two versions,
// while clients keep sending requests (streamed and not, to models both versions serve): not
// one request fails.
func TestGatewayReloadUnderLoad(t *testing.T) {
	hash := authHash("l0-reload-key")
	cfgs := [2]*config.Config{parseConfig(t, fmt.Sprintf(reloadConfigA, hash)), parseConfig(t, fmt.Sprintf(reloadConfigB, hash))}
	g, base := serveGateway(t, cfgs[0])

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 10 * time.Second}
			for i := 0; time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				model := [2]string{"m", "n"}[(w+i)%2]
				stream := i%3 == 0
				body := `{"model":"` + model + `","max_tokens":6,"stream":` + strconv.FormatBool(stream) +
					`,"messages":[{"role":"user","content":"reload ` + strconv.Itoa(i) + `"}]}`
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
				req.Header.Set("X-Api-Key", "l0-reload-key")
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				good := resp.StatusCode == 200 && (!stream || bytes.Contains(b, []byte("event: message_stop")))
				if !good {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, strconv.Itoa(resp.StatusCode)+" "+string(b))
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for i := range 100 {
		if err := g.Reload(cfgs[(i+1)%2]); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed during reloads; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 100 {
		t.Errorf("only %d requests completed during 100 reloads", ok.Load())
	}
}

// TestGatewayReloadKeepsState checks what survives a reload: a key's spent rate while its limit
// is unchanged (and not once it changes), and an ejected replica whose engine is unchanged. A
// configuration the gateway cannot serve is refused and the old one keeps serving.
func TestGatewayReloadKeepsState(t *testing.T) {
	const text = `
keys:
  - {name: a, hash: %s, limits: {requests_per_minute: %d}}
engines:
  bad: {kind: sim, sim: {fail: {status: 529}}}
  good: {kind: sim}
models:
  m: {engines: [good]}
  p: {engines: [bad], fallback: [m]}
  %s: {engines: [good]}
routing: {ejection: {consecutive_failures: 2}}
`
	hash := authHash("l0-state")
	g, base := serveGateway(t, parseConfig(t, fmt.Sprintf(text, hash, 3, "x")))
	c := anthropicClient(base, option.WithAPIKey("l0-state"))
	ctx := context.Background()
	p := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 2, Messages: userText("hi")}
	}
	// Two requests to p eject the bad primary; a third would be one too many for the limit.
	for range 2 {
		if _, err := c.Messages.New(ctx, p("p")); err != nil {
			t.Fatal(err)
		}
	}
	if got := metricValue(t, base, "layer0_engine_ejected", `engine="bad"`); got != 1 {
		t.Fatalf("bad ejected: got %v, want 1", got)
	}

	// An unrelated change: the limit's state and the ejection carry over.
	if err := g.Reload(parseConfig(t, fmt.Sprintf(text, hash, 3, "y"))); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, base, "layer0_engine_ejected", `engine="bad"`); got != 1 {
		t.Errorf("after reload, bad ejected: got %v, want 1 (state kept)", got)
	}
	before := metricValue(t, base, "layer0_fallback_total", `reason="unavailable"`)
	if _, err := c.Messages.New(ctx, p("p")); err != nil { // the third of 3
		t.Fatal(err)
	}
	if got := metricValue(t, base, "layer0_fallback_total", `reason="unavailable"`); got != before+1 {
		t.Errorf("request to the ejected primary: unavailable fallbacks %v, want %v", got, before+1)
	}
	_, err := c.Messages.New(ctx, p("m"))
	assertAPIError(t, err, 429, "rate_limit_error")

	// The limit changes: a fresh allowance.
	if err := g.Reload(parseConfig(t, fmt.Sprintf(text, hash, 4, "y"))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages.New(ctx, p("m")); err != nil {
		t.Errorf("after the limit changed: got %v, want served", err)
	}

	// No keys on a non-loopback address: refused, the running configuration keeps serving.
	bad := parseConfig(t, "server: {addr: '0.0.0.0:8080'}\n")
	if err := g.Reload(bad); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("reload without keys on 0.0.0.0: got %v, want refused", err)
	}
	if _, err := c.Messages.New(ctx, p("y")); err != nil {
		t.Errorf("after a refused reload: got %v, want the old configuration serving", err)
	}
}

// TestGatewayStartWithoutKeys checks the rule for serving without auth.
func TestGatewayStartWithoutKeys(t *testing.T) {
	tests := []struct {
		addr    string
		keys    bool
		wantErr bool
	}{
		{"127.0.0.1:8080", false, false},
		{"[::1]:8080", false, false},
		{"localhost:8080", false, false},
		{"0.0.0.0:8080", false, true},
		{":8080", false, true},
		{"10.1.2.3:8080", false, true},
		{"0.0.0.0:8080", true, false},
	}
	for _, tt := range tests {
		text := "server: {addr: '" + tt.addr + "'}\n"
		if tt.keys {
			text += "keys: [{name: k, hash: " + authHash("l0-x") + "}]\n"
		}
		g, err := layer0.New(parseConfig(t, text))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s keys=%v: got %v, want error %v", tt.addr, tt.keys, err, tt.wantErr)
		}
		if err == nil {
			if g.Authless() == tt.keys {
				t.Errorf("%s keys=%v: Authless() = %v", tt.addr, tt.keys, g.Authless())
			}
			g.Close()
		}
	}
}
