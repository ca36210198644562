package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/trace"
)

const debugUsage = `usage: layer0 debug REQUEST_ID [--url ADMIN_URL] [--key KEY] [--json]

Prints what layer0 decided for one request — key, limits, directives, cache, context cut,
replica pick, every attempt and fallback, usage and times — one line per decision, read from
GET /debug/requests/REQUEST_ID on the admin listener (server.admin_addr). The gateway keeps the
traces of its last debug.requests requests. Without an admin address the main listener serves
them to keys with debug: true: pass one with --key.

Flags:
`

// runDebug implements `layer0 debug REQUEST_ID`.
func runDebug(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("debug", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), debugUsage)
		fs.PrintDefaults()
	}
	base := fs.String("url", "http://127.0.0.1:8080", "base URL of the admin listener (or of the main one, with --key)")
	key := fs.String("key", "", "API key with debug: true, for a main listener serving the traces")
	asJSON := fs.Bool("json", false, "print the trace as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the answer")
	// Flags may come before or after the request id.
	var ids []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		ids = append(ids, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(ids) != 1 {
		return errors.New(strings.SplitN(debugUsage, "\n", 2)[0])
	}
	u := strings.TrimRight(*base, "/") + "/debug/requests/" + url.PathEscape(ids[0])
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("debug: --url: %w", err)
	}
	if *key != "" {
		req.Header.Set("X-Api-Key", *key)
	}
	resp, err := (&http.Client{Timeout: *timeout}).Do(req)
	if err != nil {
		return fmt.Errorf("debug: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("debug: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("debug: %s: %s", resp.Status, errorMessage(body))
	}
	var t trace.Trace
	if err := json.Unmarshal(body, &t); err != nil {
		return fmt.Errorf("debug: %s did not answer a trace: %w", u, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(&t)
	}
	for _, line := range t.Lines() {
		if _, err := fmt.Fprintln(stdout, line); err != nil {
			return err
		}
	}
	return nil
}

// errorMessage is the message of an error body in any of the gateway's formats, or the body.
func errorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
