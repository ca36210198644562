package config

import (
	"strings"
	"testing"
	"time"
)

func TestModelCache(t *testing.T) {
	c, err := Parse([]byte(`
engines:
  s: {kind: sim}
models:
  on: {engines: [s], cache: {enabled: true, ttl: 90s, max_bytes: 1048576, cache_sampled: true, share_across_keys: true}}
  defaults: {engines: [s], cache: {enabled: true}}
  off: {engines: [s]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Models["on"].Cache, (Cache{Enabled: true, TTL: 90 * time.Second, MaxBytes: 1 << 20, CacheSampled: true, ShareAcrossKeys: true}); got != want {
		t.Errorf("on: %+v, want %+v", got, want)
	}
	if got, want := c.Models["defaults"].Cache, (Cache{Enabled: true, TTL: DefaultCacheTTL, MaxBytes: DefaultCacheMaxBytes}); got != want {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	if c.Models["off"].Cache.Enabled {
		t.Error("the cache is on by default")
	}

	_, err = Parse([]byte(`
engines:
  s: {kind: sim}
models:
  a: {engines: [s], cache: {enabled: true, ttl: -1s, max_bytes: -5}}
  b: {engines: [s], cache: {enabled: true, max_bytes: 100}}
  c: {engines: [s], cache: {enabled: true, size: 5}}
`))
	for _, want := range []string{"models.a.cache.ttl: must be positive", "models.a.cache.max_bytes: must be positive",
		"models.b.cache.max_bytes: must be at least 4096", "field size not found"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not mention %q", err, want)
		}
	}
}
