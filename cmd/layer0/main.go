// Command layer0 is the gateway's command line: serve, config check, and the operator tools.
// It holds no logic of its own; each subcommand is a thin layer over the packages.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `layer0 — an LLM gateway in one process

Usage:
  layer0 serve [--addr HOST:PORT] [--config FILE]   serve the APIs (default: the embedded sim engine)
  layer0 config check FILE                          validate a configuration file
  layer0 keys new                                   print a fresh API key and the hash to configure
  layer0 bench [flags] --url URL                    load-test layer0 or any compatible server (bench -h)
  layer0 bench upstream [--addr HOST:PORT]          a minimal fast upstream to benchmark against
  layer0 help                                       this text
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
	var err error
	switch args[0] {
	case "serve":
		err = runServe(args[1:], stdout, stderr)
	case "config":
		err = runConfig(args[1:], stdout)
	case "keys":
		err = runKeys(args[1:], stdout)
	case "bench":
		err = runBench(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "layer0: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "layer0:", err)
		return 1
	}
	return 0
}
