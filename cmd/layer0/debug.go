package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/probe"
	"github.com/layer0ai/layer0/internal/trace"
)

const debugUsage = `usage: layer0 debug REQUEST_ID [--url ADMIN_URL] [--key KEY] [--json]
       layer0 debug --verbose [--url URL] [--key KEY] [--model M] [--json] 'PROMPT'

Prints what layer0 decided for one request — key, limits, directives, cache, context cut,
replica pick, every attempt with its start and duration, ejections, fallbacks, the replica
that served, usage and times — one line per decision.

With REQUEST_ID it reads GET /debug/requests/REQUEST_ID on the admin listener
(server.admin_addr). The gateway keeps the traces of its last debug.requests requests. Without
an admin address the main listener serves them to keys with debug: true: pass one with --key.

With --verbose it sends PROMPT to the gateway at URL (Anthropic Messages, streamed) with
X-Layer0-Debug: 1, prints the answer as it arrives, then the request's trace, which the stream
ends with, and the client's own times. The key (--key, default $LAYER0_API_KEY) needs
debug: true in the gateway's configuration.

Flags:
`

// apiKeyEnv is the environment variable the operator commands take the API key from.
const apiKeyEnv = "LAYER0_API_KEY"

// gatewayFlags are the flags of a command that asks a running gateway (debug, spend).
type gatewayFlags struct {
	url, key *string
	asJSON   *bool
	timeout  *time.Duration
	base     string // --url without a trailing slash, once parsed
}

// addGatewayFlags defines --url, --key, --json and --timeout on fs, with these help texts and
// the timeout's default.
func addGatewayFlags(fs *flag.FlagSet, urlHelp, keyHelp, jsonHelp string, timeout time.Duration) *gatewayFlags {
	return &gatewayFlags{
		url:     fs.String("url", "http://127.0.0.1:8080", urlHelp),
		key:     fs.String("key", "", keyHelp),
		asJSON:  fs.Bool("json", false, jsonHelp),
		timeout: fs.Duration("timeout", timeout, "how long to wait for the answer"),
	}
}

// parse parses fs as parseInterspersed does, then takes the key from $LAYER0_API_KEY when
// --key left it empty and sets base.
func (g *gatewayFlags) parse(fs *flag.FlagSet, args []string, n int, usage string) ([]string, error) {
	pos, err := parseInterspersed(fs, args, n, usage)
	if err != nil {
		return nil, err
	}
	defaultKey(g.key)
	g.base = strings.TrimRight(*g.url, "/")
	return pos, nil
}

// runDebug implements `layer0 debug REQUEST_ID` and `layer0 debug --verbose PROMPT`.
func runDebug(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("debug", debugUsage, stderr)
	g := addGatewayFlags(fs, "base URL of the gateway (for REQUEST_ID: of its admin listener, or of the main one with --key)",
		"API key with debug: true (default $LAYER0_API_KEY)", "print the trace as JSON", 60*time.Second)
	verbose := fs.Bool("verbose", false, "send PROMPT and print the answer and its trace")
	model := fs.String("model", "sim", "--verbose: the model to ask for")
	maxTokens := fs.Int("max-tokens", 64, "--verbose: max_tokens of the request")
	pos, err := g.parse(fs, args, 1, debugUsage)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: *g.timeout}
	if *verbose {
		return debugVerbose(hc, probe.Call{API: probe.Anthropic, Base: g.base, Key: *g.key, Model: *model,
			Prompt: pos[0], MaxTokens: *maxTokens, Header: http.Header{"X-Layer0-Debug": {"1"}}}, *g.asJSON, stdout)
	}
	t, err := fetchTrace(hc, g.base, pos[0], *g.key)
	if err != nil {
		return err
	}
	if *g.asJSON {
		return printJSON(stdout, t)
	}
	return printLines(stdout, t.Lines())
}

// verboseReport is what `debug --verbose --json` prints.
type verboseReport struct {
	// Client is the request as the client saw it: status, headers, times, the answer.
	Client *probe.Exchange `json:"client"`
	// Trace is the gateway's decision trace.
	Trace *trace.Trace `json:"trace,omitempty"`
}

// debugVerbose sends c and prints the answer, the trace and the client's times.
func debugVerbose(hc *http.Client, c probe.Call, asJSON bool, stdout io.Writer) error {
	if !asJSON {
		c.OnText = func(s string) { fmt.Fprint(stdout, s) } //nolint:errcheck // a failed write shows in the final ones
	}
	x, err := probe.Stream(context.Background(), hc, c)
	if err != nil {
		return err
	}
	var t *trace.Trace
	switch id := x.Headers["X-Layer0-Trace-Id"]; {
	case x.Trace != nil:
		t = new(trace.Trace)
		if err := json.Unmarshal(x.Trace, t); err != nil {
			return fmt.Errorf("debug: the stream's trace: %w", err)
		}
	case id != "":
		// No stream (the request failed before it started): the gateway keeps the trace by id.
		if t, err = fetchTraceSoon(hc, c.Base, id, c.Key); err != nil {
			return err
		}
	}
	if asJSON {
		if err := printJSON(stdout, verboseReport{Client: x, Trace: t}); err != nil {
			return err
		}
	} else {
		if x.Text != "" { // printed as it arrived
			if _, err := fmt.Fprint(stdout, "\n\n"); err != nil {
				return err
			}
		}
		var lines []string
		if t != nil {
			lines = t.Lines()
		}
		lines = append(lines, fmt.Sprintf("[DEBUG] client: %s %s, first byte %.3fms, first token %.3fms, end %.3fms, %d bytes, request id %s",
			x.Proto, statusText(x.Status), x.TTFBMs, x.FirstTokenMs, x.EndMs, x.Bytes, orDash(x.Headers["X-Request-Id"])))
		if err := printLines(stdout, lines); err != nil {
			return err
		}
	}
	switch {
	case x.Error != "":
		return fmt.Errorf("debug: %s", x.Error)
	case t == nil:
		return errors.New("debug: the gateway sent no trace: the key needs debug: true in its configuration (on a gateway with keys), or the gateway keeps none (debug.requests: 0)")
	}
	return nil
}

// fetchTraceSoon fetches a trace that the gateway keeps as the request's handler returns, a
// moment after the client has its answer: it asks again for up to a second.
func fetchTraceSoon(hc *http.Client, base, id, key string) (*trace.Trace, error) {
	deadline := time.Now().Add(time.Second)
	for {
		t, err := fetchTrace(hc, base, id, key)
		if err == nil || time.Now().After(deadline) || !errors.Is(err, errNoTrace) {
			return t, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// errNoTrace is the gateway's 404 for a trace it does not hold (yet, or any more).
var errNoTrace = errors.New("no such trace")

// fetchTrace reads GET base/debug/requests/id.
func fetchTrace(hc *http.Client, base, id, key string) (*trace.Trace, error) {
	u := base + "/debug/requests/" + url.PathEscape(id)
	body, status, err := adminGet(hc, "debug", u, key)
	if err != nil {
		if status == http.StatusNotFound {
			err = fmt.Errorf("%w (%w)", err, errNoTrace)
		}
		return nil, err
	}
	var t trace.Trace
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("debug: %s did not answer a trace: %w", u, err)
	}
	return &t, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printLines(w io.Writer, lines []string) error {
	for _, line := range lines {
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

func statusText(code int) string {
	if code == 0 {
		return "no answer"
	}
	return fmt.Sprintf("%d", code)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// adminGet GETs u from an operator's endpoint, with key as X-Api-Key when not empty (the main
// listener's endpoints need one), and returns the body of a 200; cmd names the command in errors,
// which carry the gateway's own message for another status.
func adminGet(hc *http.Client, cmd, u, key string) ([]byte, int, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: --url: %w", cmd, err)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", cmd, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("%s: reading the answer: %w", cmd, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("%s: %s: %s", cmd, resp.Status, probe.ErrorMessage(body))
	}
	return body, resp.StatusCode, nil
}
