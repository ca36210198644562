package store

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrorsCounter returns layer0_store_errors_total, registered on reg: the operations that could
// not use the shared store, for Config.OnError. A store of an earlier configuration registered on
// the same reg shares its counter.
func ErrorsCounter(reg prometheus.Registerer) (prometheus.Counter, error) {
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "layer0_store_errors_total",
		Help: "Rate-limit and shared-cache operations that could not use the shared store (Redis failed or was unreachable)."})
	if err := reg.Register(errs); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("store: metrics: %w", err)
		}
		return are.ExistingCollector.(prometheus.Counter), nil
	}
	return errs, nil
}
