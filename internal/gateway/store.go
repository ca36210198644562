package gateway

import (
	"fmt"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/store"
)

// redisStore is the connection to the shared store and the limits' counters on it: one
// component, kept across reloads while store's connection settings are unchanged.
type redisStore struct {
	conn   *store.Redis
	limits *limit.Redis
}

// close stops the limits' use of the connection, then closes it.
func (r redisStore) close() error {
	_ = r.limits.Close()
	return r.conn.Close()
}

// newRedisStore connects to Redis and builds the limit counters on it. The connection is lazy:
// a Redis that is down at start is handled like one that goes down later (store.on_error).
func newRedisStore(sc config.Store, o *Options) (redisStore, error) {
	client, err := store.Dial(sc.StoreURLs(), sc.Password(), sc.Timeout) // password_env checked by config
	if err != nil {
		return redisStore{}, fmt.Errorf("layer0: store: %w", err)
	}
	errs, err := store.ErrorsCounter(o.Registry)
	if err != nil {
		client.Close()
		return redisStore{}, fmt.Errorf("layer0: %w", err)
	}
	conn, err := store.New(store.Config{Client: client, Timeout: sc.Timeout, Deny: sc.OnError == config.OnErrorDeny,
		Replicas: sc.Replicas, LeaseTTL: sc.LeaseTTL, Logger: o.Logger, OnError: errs.Inc})
	if err != nil {
		client.Close()
		return redisStore{}, fmt.Errorf("layer0: %w", err)
	}
	lim, err := limit.NewRedis(conn)
	if err != nil {
		_ = conn.Close()
		return redisStore{}, fmt.Errorf("layer0: %w", err)
	}
	return redisStore{conn: conn, limits: lim}, nil
}

func keySpecs(ks []config.Key) []auth.Spec {
	specs := make([]auth.Spec, len(ks))
	for i, k := range ks {
		specs[i] = auth.Spec{Name: k.Name, Hash: k.Hash, Models: k.Models, Limits: rates(k.Limits), Debug: k.Debug, Admin: k.Admin}
	}
	return specs
}

func rates(r config.Rates) limit.Limits {
	return limit.Limits{RequestsPerMinute: r.RequestsPerMinute, InputTokensPerMinute: r.InputTokensPerMinute,
		OutputTokensPerMinute: r.OutputTokensPerMinute, Concurrent: r.Concurrent}
}
