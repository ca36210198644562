package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
)

const (
	playKey = "l0-play-key"
	tinyKey = "l0-tiny-key"
)

// byteCounter wraps the gateway's handler and keeps, per request id, the bytes the gateway
// wrote in the response body, and the status of each preflight by origin: the test's view of
// what the server sent, to compare with what the page shows.
type byteCounter struct {
	h          http.Handler
	mu         sync.Mutex
	bytes      map[string]int64
	preflights map[string]int // origin → status
}

type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer (flushes, deadlines).
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (b *byteCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cw := &countingWriter{ResponseWriter: w}
	b.h.ServeHTTP(cw, r)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		b.preflights[r.Header.Get("Origin")] = cw.status
	}
	if id := w.Header().Get("X-Request-Id"); id != "" {
		b.bytes[id] = cw.n
	}
}

func (b *byteCounter) wrote(id string) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.bytes[id]
	return n, ok
}

func (b *byteCounter) preflight(origin string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.preflights[origin]
}

// servePage serves one small HTML page on a loopback listener of its own: another origin.
func servePage(t *testing.T) (*http.Server, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><link rel="icon" href="data:,"><title>other origin</title></head><body>other origin</body></html>`)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return srv, ln
}

// chromiumPath returns the Chromium (or Chrome) binary, or skips the test when there is none.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium binary found (install the Debian package chromium): the playground's browser test needs one")
	return ""
}

// panelResult is what a panel of the playground shows once a run ends.
type panelResult struct {
	Transport string `json:"transport"`
	State     string `json:"state"`
	Text      string `json:"text"`
	Bytes     int64  `json:"bytes"`
	RequestID string `json:"rid"`
	Error     string `json:"error"`
	TTFT      string `json:"ttft"`
	TPS       string `json:"tps"`
}

const readPanels = `[...document.querySelectorAll('#panels .panel')].map((p) => ({
  transport: p.dataset.transport, state: p.dataset.state, text: p.querySelector('.text').textContent,
  bytes: Number(p.querySelector('.bytes').dataset.value), rid: p.dataset.requestId,
  error: p.querySelector('.error').textContent, ttft: p.querySelector('.ttft').textContent,
  tps: p.querySelector('.tps').textContent }))`

// TestPlaygroundInBrowser loads the playground in headless Chromium against a gateway on
// loopback (the sim engine) and runs it: every transport streams the same text, the bytes each
// panel shows are the bytes the server wrote, a wrong key and a spent rate limit are shown as
// messages, nothing leaves loopback and the console stays clean; then pages of two other
// origins call the API, one allowed by cors.allowed_origins and one not.
func TestPlaygroundInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	_, allowedLn := servePage(t)
	_, otherLn := servePage(t)
	allowed := "http://" + allowedLn.Addr().String()
	other := "http://" + otherLn.Addr().String()

	cfg := parseConfig(t, fmt.Sprintf(`
server: {addr: 127.0.0.1:0}
playground: true
debug: {requests: 32}
cors: {allowed_origins: [%q]}
keys:
  - {name: play, hash: %s, debug: true}
  - {name: tiny, hash: %s, limits: {requests_per_minute: 1}}
engines:
  sim: {kind: sim, sim: {inter_token_latency: 1ms}}
models:
  sim: {engines: [sim]}
`, allowed, authHash(playKey), authHash(tinyKey)))
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counter := &byteCounter{h: g, bytes: map[string]int64{}, preflights: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(counter, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	base := "http://" + ln.Addr().String()

	// What the browser does, seen from outside the page.
	var (
		mu       sync.Mutex
		console  []string // errors: console.error, exceptions, the browser's error log
		outbound []string // requests to anything but loopback
	)
	listener := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				console = append(console, fmt.Sprintf("console.%s: %d args", e.Type, len(e.Args)))
			}
		case *runtime.EventExceptionThrown:
			console = append(console, "exception: "+e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				console = append(console, fmt.Sprintf("log %s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			if !loopbackURL(e.Request.URL) {
				outbound = append(outbound, e.Request.URL)
			}
		}
	}
	takeConsole := func() []string {
		mu.Lock()
		defer mu.Unlock()
		c := console
		console = nil
		return c
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithListener(listener))
	defer cancelCtx()
	// The first Run starts the browser: it gets the context without a deadline (a deadline
	// would stop the browser); every step after it is bounded.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: fmt.Sprintf(`sessionStorage.setItem('layer0.playground.key', %q)`, playKey)}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	step := func(what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(what, js string, v any) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		raw, err := chromedp.Run(sctx, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v: %s", what, err, raw)
		}
	}
	waitRun := func(what string) []panelResult {
		t.Helper()
		step(what, 20*time.Second,
			chromedp.Click(chromedp.CSS(`#run`)),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := chromedp.Poll[bool](`document.body.dataset.state === 'done' && !document.querySelector('#run').disabled`,
					chromedp.WithPollingInterval(20*time.Millisecond))(ctx, tg)
				return err
			}))
		var ps []panelResult
		eval(what, readPanels, &ps)
		return ps
	}

	// / redirects to the playground, which loads the models the key may use.
	step("load the playground", 15*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#run`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.querySelector('#model').options.length > 0 && document.querySelector('#form-status').textContent === '' && document.body.dataset.ready === 'true'`)(ctx, tg)
			return err
		}))
	var loc string
	eval("location", `location.pathname`, &loc)
	if loc != "/playground" {
		t.Errorf("GET / landed on %q, want /playground", loc)
	}

	// Watch the panels' sizes: streaming must not move the layout (each size change of a panel
	// after its first layout is noted).
	var none bool
	eval("watch the layout", `(() => {
  window.jumps = [];
  const sizes = new Map();
  const ro = new ResizeObserver((es) => { for (const e of es) {
    const now = Math.round(e.contentRect.width) + 'x' + Math.round(e.contentRect.height);
    const was = sizes.get(e.target);
    if (was !== undefined && was !== now) window.jumps.push(e.target.dataset.transport + ': ' + was + ' -> ' + now);
    sizes.set(e.target, now);
  } });
  new MutationObserver(() => document.querySelectorAll('#panels .panel').forEach((p) => ro.observe(p)))
    .observe(document.querySelector('#panels'), { childList: true });
  return true; })()`, &none)

	// One run of every transport: the same text in each panel, and the bytes shown are the
	// bytes the server wrote.
	ps := waitRun("run every transport")
	var jumps []string
	eval("layout jumps", `window.jumps`, &jumps)
	if len(jumps) > 0 {
		t.Errorf("panels changed size while streaming: %q", jumps)
	}
	if len(ps) != 4 {
		t.Fatalf("panels: %+v, want 4", ps)
	}
	for _, p := range ps {
		if p.State != "done" || p.Error != "" {
			t.Errorf("%s: state %q error %q, want done", p.Transport, p.State, p.Error)
		}
		if p.Text == "" || p.Text != ps[0].Text {
			t.Errorf("%s: text %q differs from %s's %q", p.Transport, p.Text, ps[0].Transport, ps[0].Text)
		}
		wrote, ok := counter.wrote(p.RequestID)
		if !ok {
			t.Errorf("%s: request id %q unknown to the server", p.Transport, p.RequestID)
		} else if p.Bytes != wrote || wrote == 0 {
			t.Errorf("%s: the page shows %d bytes, the server wrote %d", p.Transport, p.Bytes, wrote)
		}
		if !strings.HasSuffix(p.TTFT, " ms") || p.TPS == "–" {
			t.Errorf("%s: time to first token %q, tokens/s %q: want both measured", p.Transport, p.TTFT, p.TPS)
		}
	}
	t.Logf("bytes per transport: %s", func() string {
		var b strings.Builder
		for _, p := range ps {
			fmt.Fprintf(&b, "%s=%d ", p.Transport, p.Bytes)
		}
		return b.String()
	}())
	if c := takeConsole(); len(c) > 0 {
		t.Errorf("console errors while loading and running: %q", c)
	}
	// The trace of the run is one click away for this debug key.
	step("show a trace", 10*time.Second,
		chromedp.Click(chromedp.CSS(`#trace-links button`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.querySelector('#trace').textContent.includes('"id": "' + document.querySelector('#panels .panel').dataset.requestId + '"')`)(ctx, tg)
			return err
		}))
	shot(t, ctx, "playground-run.png")

	// Asking for the trace: a debug key gets it inline at the end of an SSE stream, shown with
	// no click, and those bytes are counted too.
	step("ask for the trace", 5*time.Second, chromedp.Click(chromedp.CSS(`#debug`)))
	ps = waitRun("run with the trace asked for")
	var inline string
	eval("inline trace", `document.querySelector('#trace').textContent`, &inline)
	if !strings.Contains(inline, `"id": "`+ps[0].RequestID+`"`) {
		t.Errorf("inline trace: %.200q, want the trace of %s", inline, ps[0].RequestID)
	}
	for _, p := range ps {
		if wrote, _ := counter.wrote(p.RequestID); p.State != "done" || p.Bytes != wrote {
			t.Errorf("%s with the trace asked for: state %q, %d bytes shown, %d written", p.Transport, p.State, p.Bytes, wrote)
		}
	}
	step("trace off", 5*time.Second, chromedp.Click(chromedp.CSS(`#debug`)))

	// Narrow: a phone's 320 px shows no horizontal scroll.
	step("320 px", 10*time.Second, chromedp.EmulateViewport(320, 800))
	var overflow bool
	eval("320 px", `document.documentElement.scrollWidth > document.documentElement.clientWidth`, &overflow)
	if overflow {
		t.Error("at 320 px the page scrolls sideways")
	}
	shot(t, ctx, "playground-320.png")
	step("wide again", 10*time.Second, chromedp.EmulateViewport(1280, 900))

	// A wrong key: 401 in every panel.
	step("wrong key", 5*time.Second, chromedp.SetValue(chromedp.CSS(`#key`), "l0-wrong"))
	for _, p := range waitRun("run with a wrong key") {
		if p.State != "error" || !strings.Contains(p.Error, "401 authentication failed") {
			t.Errorf("%s with a wrong key: state %q, message %q; want a 401 message", p.Transport, p.State, p.Error)
		}
	}
	// A key allowed one request a minute: the runs after the first are refused with the wait.
	step("tiny key", 5*time.Second, chromedp.SetValue(chromedp.CSS(`#key`), tinyKey))
	limited := 0
	retry := regexp.MustCompile(`^429 rate limited, retry in \d+ s: `)
	for _, p := range waitRun("run with a rate-limited key") {
		switch {
		case p.State == "done":
		case retry.MatchString(p.Error):
			limited++
		default:
			t.Errorf("%s with a spent limit: state %q, message %q; want done or a 429 with its wait", p.Transport, p.State, p.Error)
		}
	}
	if limited < 3 {
		t.Errorf("%d panels show a 429, want at least 3 of 4 (one request a minute)", limited)
	}
	takeConsole() // the failed loads of the 401s and 429s are expected there

	// CORS: a page of an allowed origin reads an answer and its exposed headers; another
	// origin's preflight is refused, so its fetch fails.
	call := fmt.Sprintf(`fetch(%q + '/v1/models', {headers: {'x-api-key': %q, 'anthropic-version': '2023-06-01'}})
  .then(async (r) => ({status: r.status, rid: r.headers.get('x-request-id') ?? '', n: (await r.json()).data.length}))
  .catch((e) => ({status: 0, rid: '', error: String(e)}))`, base, playKey)
	type corsResult struct {
		Status int    `json:"status"`
		RID    string `json:"rid"`
		N      int    `json:"n"`
		Error  string `json:"error"`
	}
	var got corsResult
	step("allowed origin", 10*time.Second, chromedp.Navigate(allowed+"/"))
	eval("fetch from the allowed origin", call, &got)
	if got.Status != http.StatusOK || got.RID == "" || got.N == 0 {
		t.Errorf("from the allowed origin: %+v, want 200 with the request id readable and models listed", got)
	}
	if s := counter.preflight(allowed); s != http.StatusNoContent {
		t.Errorf("preflight from the allowed origin: status %d, want 204", s)
	}
	step("other origin", 10*time.Second, chromedp.Navigate(other+"/"))
	got = corsResult{}
	eval("fetch from another origin", call, &got)
	if got.Status != 0 || got.Error == "" {
		t.Errorf("from another origin: %+v, want the fetch refused by the browser", got)
	}
	if s := counter.preflight(other); s != http.StatusForbidden {
		t.Errorf("preflight from another origin: status %d, want 403", s)
	}

	// The embedded default (what `layer0 serve` without --config runs): no keys, no setup; the
	// page's key field is left empty.
	def := config.Served()
	def.Server.Addr = "127.0.0.1:0"
	_, defBase := serveGateway(t, def)
	step("the embedded default", 15*time.Second,
		chromedp.Navigate(defBase+"/"),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.body.dataset.ready === 'true' && document.querySelector('#model').value === 'sim'`)(ctx, tg)
			return err
		}))
	var cleared bool
	eval("no key", `(() => { document.querySelector('#key').value = ''; return true; })()`, &cleared)
	ps = waitRun("run on the embedded default")
	for _, p := range ps {
		if p.State != "done" || p.Text == "" || p.Text != ps[0].Text {
			t.Errorf("embedded default, %s: state %q error %q text %.40q", p.Transport, p.State, p.Error, p.Text)
		}
		// The default sim is paced like an engine (150 ms to the first token, then 50 tokens/s):
		// the numbers a new user reads are an engine's, not six digits or a dash.
		var ttft, tps float64
		if _, err := fmt.Sscanf(p.TTFT, "%g ms", &ttft); err != nil || ttft < 100 || ttft > 5000 {
			t.Errorf("embedded default, %s: time to first token %q, want about 150 ms", p.Transport, p.TTFT)
		}
		if _, err := fmt.Sscanf(p.TPS, "%g", &tps); err != nil || tps < 10 || tps > 200 {
			t.Errorf("embedded default, %s: %q tokens/s, want about 50", p.Transport, p.TPS)
		}
	}
	// Each chart's line stays out of the band its scale label is written in, and is flat at
	// zero until the first bytes (a step, not a ramp from the request's start): the first
	// columns, before any byte arrived, hold line pixels only in the bottom rows.
	var chart []struct {
		Transport  string
		InBand     int
		EarlyAbove int
		LinePixels int
	}
	eval("the charts", `[...document.querySelectorAll('#panels .panel')].map((p) => {
  const c = p.querySelector('.chart'); const g = c.getContext('2d');
  const dpr = window.devicePixelRatio || 1;
  const want = {anthropic: [0xd2, 0x69, 0x1e], openai: [0x10, 0xa3, 0x7f], binary1: [0x0b, 0x62, 0xd6], binary2: [0x82, 0x50, 0xdf]}[p.dataset.transport];
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const line = (x, y) => { const i = 4 * (y * c.width + x); return d[i + 3] > 200 && Math.abs(d[i] - want[0]) + Math.abs(d[i + 1] - want[1]) + Math.abs(d[i + 2] - want[2]) < 40; };
  let inBand = 0, early = 0, all = 0;
  for (let y = 0; y < c.height; y++) for (let x = 0; x < c.width; x++) {
    if (!line(x, y)) continue;
    all++;
    if (y < 16 * dpr) inBand++;
    if (x < c.width * 0.01 && y < c.height - 4 * dpr) early++;
  }
  return { Transport: p.dataset.transport, InBand: inBand, EarlyAbove: early, LinePixels: all };
})`, &chart)
	for _, c := range chart {
		if c.LinePixels == 0 || c.InBand != 0 || c.EarlyAbove != 0 {
			t.Errorf("chart of %s: %d line pixels, %d in the label's band, %d above the baseline before the first byte; want some, 0, 0",
				c.Transport, c.LinePixels, c.InBand, c.EarlyAbove)
		}
	}

	// The keyed example (examples/gateway.yaml), as a new user opens it: with no key typed the
	// page says a key is needed — a hint, not a red error — and offers no model that does not
	// exist there; typing the key loads the models it may use, without a click; a Run works
	// and the key's limit leaves room for more than one.
	ex, err := layer0.LoadConfig("../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ex.Server.Addr = "127.0.0.1:0"
	_, exBase := serveGateway(t, ex)
	step("the keyed example", 15*time.Second,
		chromedp.Navigate(exBase+"/playground"),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.body.dataset.ready === 'true' && document.body.dataset.models === 'loaded'`)(ctx, tg)
			return err
		}))
	var hint struct {
		Status, Kind, Color, ErrColor string
		Models                        []string
	}
	eval("no key on the keyed example", `(async () => {
  const key = document.querySelector('#key');
  key.value = '';
  document.body.dataset.models = '';
  key.dispatchEvent(new Event('input'));
  while (document.body.dataset.models !== 'loaded') await new Promise((r) => setTimeout(r, 20));
  const st = document.querySelector('#form-status');
  const probe = document.createElement('p'); probe.className = 'error'; document.body.append(probe);
  const errColor = getComputedStyle(probe).color; probe.remove();
  return { Status: st.textContent, Kind: st.dataset.kind, Color: getComputedStyle(st).color, ErrColor: errColor,
    Models: [...document.querySelector('#model').options].map((o) => o.value) };
})()`, &hint)
	if !strings.Contains(hint.Status, "needs an API key") || hint.Kind != "hint" || hint.Color == hint.ErrColor ||
		slices.Contains(hint.Models, "sim") {
		t.Errorf("keyed example without a key: %+v; want a hint (not in the error colour) and no model sim", hint)
	}
	var models []string
	eval("type the key", `(async () => {
  const key = document.querySelector('#key');
  document.body.dataset.models = '';
  for (const c of 'l0-demo-alpha') { key.value += c; key.dispatchEvent(new Event('input')); }
  while (document.body.dataset.models !== 'loaded') await new Promise((r) => setTimeout(r, 20));
  return [...document.querySelector('#model').options].map((o) => o.value);
})()`, &models)
	if !slices.Contains(models, "chat") || !slices.Contains(models, "small") || slices.Contains(models, "sim") {
		t.Errorf("models after typing the key: %q, want chat and small", models)
	}
	for run := range 2 {
		for _, p := range waitRun(fmt.Sprintf("run %d on the keyed example", run+1)) {
			if p.State != "done" || p.Text == "" || p.Error != "" {
				t.Errorf("keyed example, run %d, %s: state %q error %q", run+1, p.Transport, p.State, p.Error)
			}
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(outbound) > 0 {
		t.Errorf("requests left loopback: %q", outbound)
	}
}

// loopbackURL reports whether u stays on this machine (or in the page: data:, blob:, about:).
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	switch p.Scheme {
	case "data", "blob", "about":
		return true
	}
	ip := net.ParseIP(p.Hostname())
	return p.Hostname() == "localhost" || ip != nil && ip.IsLoopback()
}

// shot writes a screenshot of the page to $LAYER0_ARTIFACTS (when set) or the test's
// temporary directory.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	dir := os.Getenv("LAYER0_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
