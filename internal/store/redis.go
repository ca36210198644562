// Package store owns the connection to the shared store (Redis) that every layer0 replica of
// one deployment uses: the client, its health — the circuit that tells a slow Redis from a lost
// one, the heartbeats and the count of live replicas — and its error counter.
//
// The users of the connection keep their own keys and scripts: the rate limits
// (internal/limit), the budgets (internal/spend), the shared response cache (internal/cache) and
// the stored responses (internal/conversation) run their operations on Client (or its scripts
// with Run or Script, within the store's timeout) and report how they went (OK, Failed, Fail), so
// that they share one view of whether Redis is reachable. A user that keeps state in
// Redis which it must write back after Redis lost it registers a Keeper. While Redis is down
// (Up false), a user that enforces a limit computes its share with Share (the limit divided by
// the live replicas).
package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures the connection's health.
type Config struct {
	// Client is the connection (a single server or a Redis Cluster). Required. The store closes
	// it on Close.
	Client redis.UniversalClient
	// Timeout is how long one operation (one round trip) waits for Redis's answer. An answer
	// later than that fails the operation but does not mark Redis unreachable: only a lost
	// connection, or FailRun failures in a row, does (see Failed). Default DefaultTimeout.
	Timeout time.Duration
	// Deny is store.on_error: deny: a user that cannot decide without Redis refuses while Redis
	// is unreachable. Default false (allow: serve from each replica's own share).
	Deny bool
	// Replicas is the least divisor of every limit while Redis cannot be reached: the divisor is
	// the number of live replicas Redis last reported, or this when larger (or when Redis was
	// never reached). Default 1.
	Replicas int
	// LeaseTTL is how long this replica's heartbeat (and its users' leases) outlive their last
	// renewal. Default 10s.
	LeaseTTL time.Duration
	// Prefix starts every key. Default "layer0:".
	Prefix string
	// ReplicaID names this replica. Default: the host name and a random suffix.
	ReplicaID string
	// Logger receives one line each time Redis becomes unreachable or reachable again, or is
	// found to have lost its state. Default: discard.
	Logger *slog.Logger
	// OnError, when set, is called once for each operation that could not use Redis (it failed,
	// or was not tried because Redis was unreachable), for the layer0_store_errors_total counter.
	OnError func()
}

// Keeper is a user of the connection that keeps state in Redis: the store asks it to write that
// state back when Redis lost it or comes back after an outage, and to renew its leases.
type Keeper interface {
	// Stale marks what the keeper holds in Redis as possibly wrong (Redis lost its state). It
	// is called on the path that found the loss, so it must be quick.
	Stale()
	// Restore writes back what the keeper knows. It runs on the store's heartbeat loop or its
	// probe, never on a request.
	Restore()
	// Renew renews the keeper's leases; called every LeaseTTL/3 while Redis is up.
	Renew()
}

// Redis is the connection to Redis shared by the users of one configuration of the store, and
// its health. Safe for concurrent use.
type Redis struct {
	c         Config
	ttlMS     string
	up        atomic.Bool
	probing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	errCount  atomic.Uint64
	health    health
	cluster   bool

	mu      sync.Mutex // against Close's Wait, and over keepers
	keepers map[*keeper]struct{}
}

type keeper struct{ k Keeper }

// New returns the store on c.Client and starts its heartbeat. Close it when done.
func New(c Config) (*Redis, error) {
	if c.Client == nil {
		return nil, errors.New("store: redis: no client")
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Replicas = max(c.Replicas, 1)
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "layer0:"
	}
	if c.ReplicaID == "" {
		c.ReplicaID = NewReplicaID()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Redis{c: c, ttlMS: strconv.FormatInt(c.LeaseTTL.Milliseconds(), 10), closed: make(chan struct{}),
		keepers: map[*keeper]struct{}{}}
	s.health.init(s)
	_, s.cluster = c.Client.(*redis.ClusterClient)
	s.up.Store(true)
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// NewReplicaID names this replica in a shared store: the host name and a random suffix, so that
// two processes on one host, or a restarted one, never share a name.
func NewReplicaID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// Dial returns a client for urls: one redis:// or rediss:// URL for a single server, or several
// (the seed nodes) for a Redis Cluster. password, when not empty, overrides the URLs'. Operations
// are bounded by timeout and never retried by the client: a script that timed out may still
// run, and running it again could count a request twice.
func Dial(urls []string, password string, timeout time.Duration) (redis.UniversalClient, error) {
	if len(urls) == 0 {
		return nil, errors.New("store: redis: no URL")
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	o, err := redis.ParseURL(urls[0])
	if err != nil {
		return nil, fmt.Errorf("store: redis: %w", err)
	}
	if password != "" {
		o.Password = password
	}
	// Connecting may take longer than one operation; operations may not.
	dial := max(timeout, 250*time.Millisecond)
	if len(urls) == 1 {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dial, timeout, timeout
		o.MaxRetries = -1
		o.DialerRetries = 1 // a refused connection is an outage, known at once (not after retries)
		o.ContextTimeoutEnabled = true
		o.DisableIdentity = true
		return redis.NewClient(o), nil
	}
	addrs := make([]string, 0, len(urls))
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			return nil, fmt.Errorf("store: redis: bad cluster node URL %q", redactURL(u))
		}
		addrs = append(addrs, p.Host)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		DialTimeout: dial, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true, DisableIdentity: true,
	}), nil
}

func redactURL(s string) string {
	if p, err := url.Parse(s); err == nil && p.User != nil {
		p.User = url.User("xxx")
		return p.String()
	}
	return s
}

// Client is the connection, for a user's own commands and scripts.
func (s *Redis) Client() redis.UniversalClient { return s.c.Client }

// Timeout is how long one operation waits for Redis's answer.
func (s *Redis) Timeout() time.Duration { return s.c.Timeout }

// Deny reports store.on_error: deny.
func (s *Redis) Deny() bool { return s.c.Deny }

// LeaseTTL is how long a replica's heartbeat and leases outlive their last renewal.
func (s *Redis) LeaseTTL() time.Duration { return s.c.LeaseTTL }

// Prefix starts every key of the store's users.
func (s *Redis) Prefix() string { return s.c.Prefix }

// ReplicaID names this replica.
func (s *Redis) ReplicaID() string { return s.c.ReplicaID }

// Cluster reports whether the client is a Redis Cluster's: a script takes keys of one shard only.
func (s *Redis) Cluster() bool { return s.cluster }

// Up reports whether Redis answered the last operation (or the last probe since it failed).
func (s *Redis) Up() bool { return s.up.Load() }

// Errors returns how many operations could not use Redis.
func (s *Redis) Errors() uint64 { return s.errCount.Load() }

// Keep registers k: it is told when Redis lost its state or comes back, and to renew its
// leases, until the returned function is called.
func (s *Redis) Keep(k Keeper) (forget func()) {
	e := &keeper{k}
	s.mu.Lock()
	s.keepers[e] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.keepers, e)
		s.mu.Unlock()
	}
}

func (s *Redis) each(f func(Keeper)) {
	s.mu.Lock()
	ks := make([]Keeper, 0, len(s.keepers))
	for e := range s.keepers {
		ks = append(ks, e.k)
	}
	s.mu.Unlock()
	for _, k := range ks {
		f(k)
	}
}

// Close stops the heartbeat and the renewal of the keepers' leases, removes the heartbeat (the
// others' divisor drops at their next heartbeat) and closes the client. Leases still held expire
// after the lease TTL, as a dead replica's would.
func (s *Redis) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.mu.Lock()
		close(s.closed)
		s.mu.Unlock()
	})
	if !first {
		return nil
	}
	s.wg.Wait()
	s.unbeat() // after the heartbeats stop: none writes the entry again
	if err := s.c.Client.Close(); err != nil {
		return fmt.Errorf("store: redis: %w", err)
	}
	return nil
}

// loop writes the heartbeat every period and has the keepers renew their leases every third of
// the lease TTL; when Redis's state was found lost, it has them write everything back at once.
func (s *Redis) loop() {
	defer s.wg.Done()
	t := time.NewTicker(s.health.every)
	defer t.Stop()
	renewed := time.Now()
	s.beat()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		case <-s.health.kick:
		}
		if !s.up.Load() {
			continue
		}
		// The write-back first: a heartbeat written after a loss says this replica's counts are
		// in Redis again (a loss found by this heartbeat kicks the loop, which comes back here).
		if s.health.restore.Swap(false) {
			s.each(Keeper.Restore)
			s.health.addNext.Store(true)
			renewed = time.Now()
		}
		s.beat()
		if time.Since(renewed) >= s.c.LeaseTTL/3 {
			renewed = time.Now()
			s.each(Keeper.Renew)
		}
	}
}
