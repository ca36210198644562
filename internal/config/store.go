package config

import (
	"net/url"
	"os"
	"strings"
	"time"
)

// Store kinds.
const (
	// StoreMemory keeps the rate-limit counters in this process: each replica limits alone.
	StoreMemory = "memory"
	// StoreRedis keeps them in Redis, shared by every replica that names the same server.
	StoreRedis = "redis"
)

// What a replica does while the shared store cannot be reached.
const (
	// OnErrorAllow keeps serving, with this replica's own counters enforcing each limit divided
	// by the number of live replicas (at least Store.Replicas).
	OnErrorAllow = "allow"
	// OnErrorDeny answers 503 with retry-after to every request that a limit applies to.
	OnErrorDeny = "deny"
)

// Store defaults, also documented on the fields and in docs/config.md.
const (
	DefaultStoreTimeout  = time.Second
	DefaultStoreLeaseTTL = 10 * time.Second
	// DefaultStoreCacheMaxEntryBytes is the largest answer kept in Redis (1 MiB).
	DefaultStoreCacheMaxEntryBytes = 1 << 20
	DefaultStoreCacheFillWait      = 5 * time.Second
	DefaultStoreCacheTimeout       = 50 * time.Millisecond
)

// Store says where the rate-limit counters live. The in-process default suits one replica; with
// several replicas behind one address, kind redis makes every limit hold across all of them.
type Store struct {
	// Kind is memory or redis. Default memory.
	Kind string `yaml:"kind"`
	// URL is the Redis server, redis://[user:password@]host:port[/db] (rediss:// for TLS);
	// several comma-separated URLs (one per seed node) select Redis Cluster. Required for
	// kind redis.
	URL string `yaml:"url"`
	// PasswordEnv names the environment variable holding the Redis password, so that it need
	// not be in the file (it overrides a password in URL). Optional.
	PasswordEnv string `yaml:"password_env"`
	// Timeout is how long one store operation (one round trip) waits for Redis's answer. A later
	// answer fails that request's operation (503) without marking Redis unreachable: only a lost
	// connection, or three failures in a row, does. Default 1s.
	Timeout time.Duration `yaml:"timeout"`
	// OnError is what happens while Redis cannot be reached: allow (serve with this replica's own
	// counters at limit ÷ live replicas) or deny (503 with retry-after). Default allow.
	OnError string `yaml:"on_error"`
	// Replicas is the least divisor of every limit while Redis is unreachable: each replica
	// divides by the number of live replicas Redis last reported (each writes a heartbeat), or by
	// this when larger or when it never reached Redis. Default 1.
	Replicas int `yaml:"replicas"`
	// LeaseTTL is how long a replica's concurrency slots outlive it: a replica renews its slots
	// every third of it, and the slots of a replica that stopped renewing (it died, or lost Redis)
	// are freed for the others after it. Default 10s.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Cache shares the response cache (the models' cache sections) in the store too.
	Cache StoreCache `yaml:"cache"`
}

// StoreCache is the response cache in the shared store (kind redis): answers written once, read
// by every replica, each replica's in-memory cache of a model (its cache.max_bytes) in front.
type StoreCache struct {
	// Enabled keeps cached answers in Redis. Default false (each replica caches alone).
	Enabled bool `yaml:"enabled"`
	// MaxEntryBytes is the largest answer (encoded) stored in Redis; a larger one is cached in
	// the replica's memory only. Default 1048576 (1 MiB).
	MaxEntryBytes int64 `yaml:"max_entry_bytes"`
	// FillWait bounds how long a replica that misses waits for another replica already calling
	// the engine for the same request, before calling it itself; it is also the lifetime of the
	// marker saying a replica is filling the key. Default 5s.
	FillWait time.Duration `yaml:"fill_wait"`
	// Timeout bounds one cache operation on Redis. Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
}

func (s *Store) setDefaults() {
	setDefault(&s.Kind, StoreMemory)
	setDefault(&s.Timeout, DefaultStoreTimeout)
	setDefault(&s.OnError, OnErrorAllow)
	setDefault(&s.Replicas, 1)
	setDefault(&s.LeaseTTL, DefaultStoreLeaseTTL)
	setDefault(&s.Cache.MaxEntryBytes, DefaultStoreCacheMaxEntryBytes)
	setDefault(&s.Cache.FillWait, DefaultStoreCacheFillWait)
	setDefault(&s.Cache.Timeout, DefaultStoreCacheTimeout)
}

func (s *Store) validate(errs *Errors) {
	switch s.Kind {
	case StoreMemory:
		if s.URL != "" {
			errs.add("store.url", "only for kind redis")
		}
	case StoreRedis:
		if s.URL == "" {
			errs.add("store.url", "required for kind redis")
		}
		if s.PasswordEnv != "" && os.Getenv(s.PasswordEnv) == "" {
			errs.add("store.password_env", "the environment variable %s is not set", s.PasswordEnv)
		}
		for _, u := range splitURLs(s.URL) {
			if unescapedAt(u) {
				errs.add("store.url", "%s, got %q", unescapedAtMsg, RedactUserinfo(u))
				continue
			}
			p, err := url.Parse(u)
			if err != nil || (p.Scheme != "redis" && p.Scheme != "rediss") || p.Host == "" {
				errs.add("store.url", "must be redis://host:port or rediss://host:port, got %q", RedactUserinfo(u))
			}
		}
	default:
		errs.add("store.kind", "must be memory or redis, got %q", s.Kind)
	}
	notNegative(errs, "store.timeout", s.Timeout)
	if s.OnError != OnErrorAllow && s.OnError != OnErrorDeny {
		errs.add("store.on_error", "must be allow or deny, got %q", s.OnError)
	}
	if s.Replicas < 0 {
		errs.add("store.replicas", "must be positive")
	}
	if s.LeaseTTL < 0 {
		errs.add("store.lease_ttl", "must not be negative")
	} else if s.LeaseTTL > 0 && s.LeaseTTL < 300*time.Millisecond {
		errs.add("store.lease_ttl", "must be at least 300ms, got %s", s.LeaseTTL)
	}
	if s.Cache.Enabled && s.Kind != StoreRedis {
		errs.add("store.cache.enabled", "only for kind redis")
	}
	if s.Cache.MaxEntryBytes < 0 {
		errs.add("store.cache.max_entry_bytes", "must be positive")
	}
	if s.Cache.FillWait < 0 || s.Cache.FillWait > time.Minute {
		errs.add("store.cache.fill_wait", "must be between 0 and 1m, got %s", s.Cache.FillWait)
	}
	notNegative(errs, "store.cache.timeout", s.Cache.Timeout)
}

// Password is the Redis password: the value of the environment variable PasswordEnv names (which
// validation checks is set), or "" without one.
func (s *Store) Password() string {
	if s.PasswordEnv == "" {
		return ""
	}
	return os.Getenv(s.PasswordEnv)
}

// StoreURLs returns the store's URLs: one for a single Redis server, several for the seed nodes
// of a Redis Cluster.
func (s *Store) StoreURLs() []string { return splitURLs(s.URL) }

func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
