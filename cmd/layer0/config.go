package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
)

// runConfig implements `layer0 config check FILE`: it prints every problem with its path and
// fails when there is any. Beyond the file itself it runs the checks `serve` makes at start —
// it builds the gateway (engines, credentials from the environment, keys against the listen
// address) and loads the TLS files — so a file it accepts is one `serve` starts with.
const configUsage = "usage: layer0 config check FILE"

func runConfig(args []string, stdout io.Writer) error {
	if len(args) != 2 || args[0] != "check" {
		return errors.New(configUsage)
	}
	c, err := config.Load(args[1])
	if err != nil {
		return err
	}
	g, err := layer0.New(c)
	if err != nil {
		return fmt.Errorf("config: %s: %w", args[1], err)
	}
	g.Close() //nolint:errcheck // built only to be checked
	if t := c.Server.TLS; t.CertFile != "" {
		if err := server.EnableTLS(&server.Front{Server: &http.Server{}}, t.CertFile, t.KeyFile, nil); err != nil {
			return fmt.Errorf("config: %s: server.tls: %w", args[1], err)
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%d engines, %d models)\n", args[1], len(c.Engines), len(c.Models))
	return nil
}
