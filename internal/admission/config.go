package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/route"
)

// carry returns the queues of the previous generation's gate, or, for the first generation (prev
// nil), a new set whose metrics are registered with reg and whose queues read the clock now.
func carry(prev *Gate, reg prometheus.Registerer, now func() time.Time) (*Set, error) {
	if prev != nil {
		return prev.Queues(), nil
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return NewSet(now, m), nil
}

// FromConfig builds the gate of cfg's admission section. replica finds an engine's routing
// replica by its name. The queues are prev's, the previous generation's gate, so a reload keeps
// the requests waiting and the slots in flight; the first generation (prev nil) makes them, its
// metrics registered with reg, its clock now. With admission off the gate gates no model; on, it
// gates each model whose every engine has a concurrency cap (config.Engine.AdmissionCap): a
// model with an uncapped engine has no known capacity to queue for.
func FromConfig(cfg *config.Config, replica func(engine string) *route.Replica, prev *Gate, reg prometheus.Registerer,
	now func() time.Time) (*Gate, error) {
	set, err := carry(prev, reg, now)
	if err != nil {
		return nil, err
	}
	a := &cfg.Admission
	c := Config{DefaultBand: a.DefaultBand, Keys: map[string]KeyPolicy{}, Pools: map[string]*Pool{}, Queues: set}
	for _, name := range a.SortedBands() {
		b := a.Bands[name]
		c.Bands = append(c.Bands, Band{Name: name, Priority: b.Priority, MaxWait: b.MaxWait, Sheddable: b.Sheddable,
			MaxShare: b.MaxShare})
	}
	for _, k := range cfg.Keys {
		c.Keys[k.Name] = KeyPolicy{Band: k.Priority, Allow: k.AllowPriority, Weight: k.Weight, Team: k.Team}
	}
	if a.Enabled {
		for id, m := range cfg.Models {
			var reps []capped
			for _, en := range m.Engines {
				ec := cfg.Engines[en]
				n := ec.AdmissionCap()
				if n <= 0 {
					reps = nil
					break
				}
				reps = append(reps, capped{r: replica(en), cap: n})
			}
			if len(reps) == 0 {
				continue
			}
			for _, c := range reps {
				c.r.SetLimit(c.cap) // the picker places released requests where there is room
			}
			c.Pools[id] = &Pool{Model: id, Capacity: capacity(reps, a.MaxUtilization), MaxQueue: a.MaxQueue,
				MaxBytes: a.MaxQueueBytes, Poll: a.PollInterval}
		}
	}
	return New(c)
}

// capped is a replica of a pool and its concurrency cap.
type capped struct {
	r   *route.Replica
	cap int
}

// capacity is a pool's Capacity: the caps of the replicas that can take a request, where a
// replica at or above maxUtil counts only the requests it already serves (it takes no new one
// until its utilisation falls).
func capacity(reps []capped, maxUtil float64) func() int {
	return func() int {
		n := 0
		for _, c := range reps {
			switch {
			case c.r.Unavailable() != "":
			case c.r.Utilization() >= maxUtil:
				n += min(c.cap, int(c.r.Outstanding()))
			default:
				n += c.cap
			}
		}
		return n
	}
}
