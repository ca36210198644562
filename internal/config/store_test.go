package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStoreDefaults(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "pw")
	cacheDefaults := StoreCache{MaxEntryBytes: 1 << 20, FillWait: 5 * time.Second, Timeout: 50 * time.Millisecond}
	want := Store{Kind: StoreMemory, Timeout: time.Second, OnError: OnErrorAllow, Replicas: 1,
		LeaseTTL: 10 * time.Second, Cache: cacheDefaults}
	if diff := cmp.Diff(want, Default().Store); diff != "" {
		t.Errorf("default store (-want +got):\n%s", diff)
	}
	c, err := Parse([]byte(`
store:
  kind: redis
  url: "redis://r1:6379, redis://r2:6379"
  timeout: 20ms
  on_error: deny
  replicas: 3
  lease_ttl: 30s
  password_env: REDIS_PASSWORD
  cache: {enabled: true, max_entry_bytes: 65536, fill_wait: 2s, timeout: 20ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	want = Store{Kind: StoreRedis, URL: "redis://r1:6379, redis://r2:6379", Timeout: 20 * time.Millisecond,
		OnError: OnErrorDeny, Replicas: 3, LeaseTTL: 30 * time.Second, PasswordEnv: "REDIS_PASSWORD",
		Cache: StoreCache{Enabled: true, MaxEntryBytes: 65536, FillWait: 2 * time.Second, Timeout: 20 * time.Millisecond}}
	if diff := cmp.Diff(want, c.Store); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	if got := c.Store.StoreURLs(); !cmp.Equal(got, []string{"redis://r1:6379", "redis://r2:6379"}) {
		t.Errorf("StoreURLs: %q", got)
	}
}

func TestStoreInvalid(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"store: {kind: etcd}", "store.kind: must be memory or redis"},
		{"store: {kind: redis}", "store.url: required for kind redis"},
		{"store: {kind: redis, url: 'http://r:6379'}", "store.url: must be redis://"},
		{"store: {kind: redis, url: 'redis://:secret@r:6379', on_error: maybe}", "store.on_error: must be allow or deny"},
		{"store: {url: 'redis://r:6379'}", "store.url: only for kind redis"},
		{"store: {kind: redis, url: 'redis://r', replicas: -2}", "store.replicas: must be positive"},
		{"store: {kind: redis, url: 'redis://r', lease_ttl: 100ms}", "store.lease_ttl: must be at least 300ms"},
		{"store: {kind: redis, url: 'redis://r', timeout: -1s}", "store.timeout: must not be negative"},
		{"store: {cache: {enabled: true}}", "store.cache.enabled: only for kind redis"},
		{"store: {kind: redis, url: 'redis://r', cache: {max_entry_bytes: -1}}", "store.cache.max_entry_bytes: must be positive"},
		{"store: {kind: redis, url: 'redis://r', cache: {fill_wait: 2m}}", "store.cache.fill_wait: must be between 0 and 1m"},
		{"store: {kind: redis, url: 'redis://r', cache: {timeout: -1s}}", "store.cache.timeout: must not be negative"},
		{"store: {kind: redis, url: 'redis://r', cache: {enabld: true}}", "enabld"},
		{"store: {kind: redis, url: 'redis://r', password_env: L0_TEST_SURELY_UNSET}", "store.password_env: the environment variable L0_TEST_SURELY_UNSET is not set"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", tc.yaml, err)
		}
	}
}
