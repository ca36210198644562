package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/layer0ai/layer0/internal/config"
)

// runConfig implements `layer0 config check FILE`: it prints every problem with its path and
// fails when there is any.
func runConfig(args []string, stdout io.Writer) error {
	if len(args) != 2 || args[0] != "check" {
		return errors.New("usage: layer0 config check FILE")
	}
	c, err := config.Load(args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (%d engines, %d models)\n", args[1], len(c.Engines), len(c.Models))
	return nil
}
