package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/probe"
)

const probeUsage = `usage: layer0 probe URL [--key KEY] [--model M] [--insecure] [--ca FILE] [--json] [--timeout D]

Connects to URL as a client would and reports each step: DNS (addresses, time), the TCP connect,
the TLS handshake (version, cipher suite, ALPN offered — anthropic-v3, h2, http/1.1 — and
negotiated, the certificate's subject, names and expiry), the HTTP/2 SETTINGS the server sent
(over TLS, or h2c with prior knowledge for http:// URLs), Alt-Svc and a QUIC handshake when
HTTP/3 is advertised, then one small streaming request per API the server speaks — Anthropic
Messages, OpenAI Chat Completions, layer0's binary protocol — with time to first byte, first
token and end, bytes per token, and X-Request-ID, X-Processing-Time and Server. Works against
layer0 or any other server: an API that answers 404 is reported absent. The exit code is 1 when
the connection failed or no API request succeeded.

Flags:
`

// runProbe implements `layer0 probe URL`.
func runProbe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("probe", probeUsage, stderr)
	var o probe.Options
	fs.StringVar(&o.Key, "key", "", "API key for the requests (default $LAYER0_API_KEY)")
	fs.StringVar(&o.Model, "model", "", "model to ask for (default: the first of GET /v1/models)")
	fs.StringVar(&o.Prompt, "prompt", "", "the requests' user message (default \"Say hello.\")")
	fs.IntVar(&o.MaxTokens, "max-tokens", 16, "max_tokens of each request")
	fs.BoolVar(&o.Insecure, "insecure", false, "do not verify the server's certificate")
	ca := fs.String("ca", "", "PEM file of the certificate authorities to verify the server with (default: the system's)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "bound on each step: lookup, connect, handshake, each request")
	urls, err := parseInterspersed(fs, args, 1, probeUsage)
	if err != nil {
		return err
	}
	o.URL = urls[0]
	defaultKey(&o.Key)
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			return fmt.Errorf("probe: --ca: %w", err)
		}
		o.RootCAs = x509.NewCertPool()
		if !o.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("probe: --ca %s: no PEM certificate in it", *ca)
		}
	}
	r, err := probe.Run(context.Background(), o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		for _, line := range r.Lines() {
			if _, err = fmt.Fprintln(stdout, line); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if f := r.Failure(); f != "" {
		return errors.New("probe: " + f) // the report is printed; the exit code says it failed
	}
	return nil
}

// newFlagSet is the flag set of command name, reporting its errors to stderr, and its usage
// there too: the text usage, then the flags.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseInterspersed parses fs from args, with flags before or after the positional arguments,
// and returns the positional ones, of which there must be n: another number is an error saying
// how the command is used (usage's first line).
func parseInterspersed(fs *flag.FlagSet, args []string, n int, usage string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != n {
		return nil, errors.New(strings.SplitN(usage, "\n", 2)[0])
	}
	return pos, nil
}

// defaultKey sets *key, when the flag left it empty, from $LAYER0_API_KEY: read here, not as
// the flag's default, which --help would print.
func defaultKey(key *string) {
	if *key == "" {
		*key = os.Getenv(apiKeyEnv)
	}
}
