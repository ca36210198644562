package config

import (
	"strings"
	"testing"
)

func TestContextAndOffload(t *testing.T) {
	c, err := Parse([]byte(`
engines:
  s: {kind: sim}
models:
  m: {engines: [s]}
  cut: {engines: [s], context_window: 8000, context: {overflow: truncate, split: fixed, max_tokens_per_shard: 1000}}
aliases: {latest: m}
offload_targets:
  batch: {model: cut}
  alias: {model: latest}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Models["m"].Context, (Context{Overflow: OverflowRefuse, Split: SplitSemantic, MaxTokensPerShard: DefaultMaxTokensPerShard}); got != want {
		t.Errorf("defaults: got %+v, want %+v", got, want)
	}
	if got, want := c.Models["cut"].Context, (Context{Overflow: OverflowTruncate, Split: SplitFixed, MaxTokensPerShard: 1000}); got != want {
		t.Errorf("cut: got %+v, want %+v", got, want)
	}
	if c.OffloadTargets["batch"].Model != "cut" || c.OffloadTargets["alias"].Model != "latest" {
		t.Errorf("offload targets: %+v", c.OffloadTargets)
	}
}

func TestContextAndOffloadErrors(t *testing.T) {
	_, err := Parse([]byte(`
engines:
  s: {kind: sim}
models:
  m: {engines: [s], context: {overflow: shard, split: words, max_tokens_per_shard: -1}}
offload_targets:
  nomodel: {}
  lost: {model: missing}
  "http://x.example/v1": {model: m}
  fine: {model: m, url: "http://x"}
`))
	if err == nil {
		t.Fatal("got nil error")
	}
	for _, w := range []string{
		`models.m.context.overflow: must be refuse or truncate, got "shard"`,
		`models.m.context.split: must be semantic or fixed, got "words"`,
		"models.m.context.max_tokens_per_shard: must be positive, got -1",
		"offload_targets.nomodel.model: required",
		`offload_targets.lost.model: unknown model "missing"`,
		`offload_targets.http://x.example/v1: a target's name is 1 to 64 letters`,
		"field url not found",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not mention %q", err, w)
		}
	}
}
