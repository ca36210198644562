package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/layer0ai/layer0/internal/auth"
)

const keysUsage = "usage: layer0 keys new [--name NAME]"

const keysHelp = keysUsage + `

Prints a fresh API key and its SHA-256 hash. Give the key to the client; the configuration
declares only the hash, and the key is shown only here.

Without --name it prints "key: …" and "hash: …" lines. With --name NAME it prints the entry to
paste under keys: in the configuration, the key in a comment above it.`

// runKeys implements `layer0 keys new [--name NAME]`: it prints a fresh API key and its SHA-256
// hash, as "key: …" and "hash: …" lines (valid YAML), or with --name as a ready-to-paste entry of
// the configuration's keys list.
func runKeys(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "new" {
		return errors.New(keysUsage)
	}
	fs := flag.NewFlagSet("keys new", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("name", "", "the key's name in logs, metrics and limits")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		return errors.New(keysUsage)
	}
	key, hash := auth.NewKey()
	if *name == "" {
		_, err := fmt.Fprintf(stdout, "key: %s\nhash: %s\n", key, hash)
		return err
	}
	if strings.ContainsAny(*name, "\r\n") {
		return errors.New("keys new: --name must be one line")
	}
	entry, err := yaml.Marshal([]struct {
		Name string `yaml:"name"`
		Hash string `yaml:"hash"`
	}{{*name, hash}})
	if err != nil {
		return fmt.Errorf("keys new: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "# API key %s (give it to the client; the configuration keeps only its hash)\n%s", key, entry)
	return err
}
