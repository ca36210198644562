package gateway

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/limit"
)

// newRedisStore connects the limit counters to Redis. The connection is lazy: a Redis that is
// down at start is handled like one that goes down later (store.on_error).
func newRedisStore(sc config.Store, o *Options) (*limit.Redis, error) {
	password := ""
	if sc.PasswordEnv != "" {
		if password = os.Getenv(sc.PasswordEnv); password == "" {
			return nil, fmt.Errorf("layer0: store.password_env: the environment variable %s is not set", sc.PasswordEnv)
		}
	}
	client, err := limit.DialRedis(sc.StoreURLs(), password, sc.Timeout)
	if err != nil {
		return nil, fmt.Errorf("layer0: store: %w", err)
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "layer0_store_errors_total",
		Help: "Rate-limit and shared-cache operations that could not use the shared store (Redis failed or was unreachable)."})
	if err := o.Registry.Register(errs); err != nil {
		are, ok := err.(prometheus.AlreadyRegisteredError)
		if !ok {
			client.Close()
			return nil, fmt.Errorf("layer0: store metrics: %w", err)
		}
		errs = are.ExistingCollector.(prometheus.Counter) // the store of an earlier configuration registered it
	}
	st, err := limit.NewRedis(limit.RedisConfig{Client: client, Timeout: sc.Timeout, Deny: sc.OnError == config.OnErrorDeny,
		Replicas: sc.Replicas, LeaseTTL: sc.LeaseTTL, Logger: o.Logger, OnError: errs.Inc})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("layer0: %w", err)
	}
	return st, nil
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
