package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/layer0ai/layer0/internal/auth"
)

const keysUsage = "usage: layer0 keys new"

// runKeys implements `layer0 keys new`: it prints a fresh API key and its SHA-256 hash, as
// "key: …" and "hash: …" lines (valid YAML). The key is shown only here — give it to the
// client; the configuration declares only the hash.
func runKeys(args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] != "new" {
		return errors.New(keysUsage)
	}
	key, hash := auth.NewKey()
	_, err := fmt.Fprintf(stdout, "key: %s\nhash: %s\n", key, hash)
	return err
}
