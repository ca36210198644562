// Command layer0 is the gateway's command line: serve, config check, and the operator tools.
// It holds no logic of its own; each subcommand is a thin layer over the packages.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/layer0ai/layer0/internal/version"
)

const usage = `layer0 — an LLM gateway in one process

Usage:
  layer0 serve [--addr HOST:PORT] [--config FILE]   serve the APIs (default: the embedded sim engine)
  layer0 config check FILE                          validate a configuration file
  layer0 keys new [--name NAME]                     print a fresh API key and the hash (--name: the keys: entry)
  layer0 debug REQUEST_ID [--url ADMIN_URL] [--json] print what layer0 decided for a request
  layer0 debug --verbose [--model M] 'PROMPT'       send PROMPT, print the answer and every decision, timed
  layer0 spend [--url ADMIN_URL] [--json]          what each key and team spent and has left (docs/spend.md)
  layer0 probe URL [--insecure] [--json]            inspect an endpoint: DNS, TCP, TLS/ALPN, HTTP/2
                                                    SETTINGS, HTTP/3, one timed request per API
  layer0 bench [flags] --url URL                    load-test layer0 or any compatible server (bench -h)
  layer0 bench upstream [--addr HOST:PORT]          a minimal fast upstream to benchmark against
  layer0 version                                    print the version, commit, build time and Go version
  layer0 help                                       this text

Every command prints its usage with --help (or -h) and exits 0.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// Asked for help, a command prints its usage on stdout and the exit code is 0; its flag
	// set prints the same on stderr for a mistake.
	help := wantsHelp(args[1:])
	flagOut := stderr
	if help {
		flagOut = stdout
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(args[1:], stdout, flagOut)
	case "config":
		if help {
			fmt.Fprintln(stdout, configUsage)
			return 0
		}
		err = runConfig(args[1:], stdout)
	case "keys":
		if help {
			fmt.Fprintln(stdout, keysHelp)
			return 0
		}
		err = runKeys(args[1:], stdout)
	case "bench":
		err = runBench(args[1:], stdout, flagOut)
	case "debug":
		err = runDebug(args[1:], stdout, flagOut)
	case "probe":
		err = runProbe(args[1:], stdout, flagOut)
	case "spend":
		err = runSpend(args[1:], stdout, flagOut)
	case "version", "--version", "-version":
		if help {
			fmt.Fprintln(stdout, "usage: layer0 version\n\nPrints the module version, the commit, the build time and the Go version.")
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintln(stderr, "usage: layer0 version")
			return 2
		}
		fmt.Fprint(stdout, version.Get())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "layer0: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var mistake usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0 // the flag set printed the usage
	case errors.As(err, &mistake):
		if !mistake.printed {
			fmt.Fprintln(stderr, errorLine(err))
		}
		return 2
	case err != nil && strings.HasPrefix(err.Error(), "usage: "):
		fmt.Fprintln(stderr, err)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, errorLine(err))
		return 1
	}
	return 0
}

// usageError is a mistake in a command's arguments (an unknown flag, a value that does not
// parse, an argument too many): the command exits 2. printed is set when the flag set has
// already said what was wrong, with the usage, on stderr.
type usageError struct {
	err     error
	printed bool
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef is an argument mistake described by format and args.
func usagef(format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...)}
}

// parseFlags parses args with fs; a mistake is a usageError the flag set has printed.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return usageError{err: err, printed: true}
	}
	return err
}

// errorLine is err as the command prints it: "layer0: " once in front, and not again where a
// wrapped error of the library repeats it.
func errorLine(err error) string {
	return "layer0: " + strings.ReplaceAll(strings.TrimPrefix(err.Error(), "layer0: "), ": layer0: ", ": ")
}

// wantsHelp reports whether args ask for help: -h, -help or --help before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}
