package config

import (
	"fmt"
	"slices"
	"time"
)

// Admission configures fair admission in front of saturated pools (docs/admission.md): when a
// model's replicas are all at their concurrency caps, requests wait in layer0, released by
// priority band and, within a band, by the API keys' weights; a request that cannot be released
// within its band's max_wait is refused at once with 529 (503 for OpenAI clients). Off by
// default.
type Admission struct {
	// Enabled turns admission on. Default false. On, a model is gated only when every engine of
	// its pool has a concurrency cap (engines' max_concurrency, or a sim's sim.max_concurrency);
	// a pool with room is never queued for.
	Enabled bool `yaml:"enabled"`
	// MaxQueue bounds the requests waiting for each model. Default 1024.
	MaxQueue int `yaml:"max_queue"`
	// MaxQueueBytes bounds the estimated memory of the requests waiting for each model (their
	// content's bytes). Default 67108864 (64 MiB).
	MaxQueueBytes int64 `yaml:"max_queue_bytes"`
	// MaxUtilization is the utilisation, 0 to 1, at or above which a replica takes no new
	// request from the queue (the engine reports its own queue or a full KV cache) until it
	// falls. Default 1.
	MaxUtilization float64 `yaml:"max_utilization"`
	// PollInterval is how often a queue that cannot release looks again at its replicas when
	// no request ends (a replica back, a utilisation that fell). Default 100ms.
	PollInterval time.Duration `yaml:"poll_interval"`
	// DefaultBand is the band of keys without a priority. Default "standard".
	DefaultBand string `yaml:"default_band"`
	// Bands are the priority bands by name. Default: interactive (priority 300, max_wait 10s),
	// standard (200, 30s) and batch (100, 120s, sheddable, max_share 0.75).
	Bands map[string]AdmissionBand `yaml:"bands"`
}

// AdmissionBand is one priority band.
type AdmissionBand struct {
	// Priority orders the bands: a higher one is released first. Required, distinct.
	Priority int `yaml:"priority"`
	// MaxWait is the longest a request of the band waits for a slot. Default 30s.
	MaxWait time.Duration `yaml:"max_wait"`
	// Sheddable requests are refused first under pressure: a full queue evicts them for a
	// request of a higher band. Default false.
	Sheddable bool `yaml:"sheddable"`
	// MaxShare, above 0 and at most 1, is the most of a pool's capacity the band's requests
	// may hold at once; the rest stays free for higher bands, so a burst of the band cannot take
	// every slot just before a higher band's request arrives. Default 1 (all of it).
	MaxShare float64 `yaml:"max_share"`
}

// Defaults of the admission section.
const (
	DefaultAdmissionMaxQueue      = 1024
	DefaultAdmissionMaxQueueBytes = 64 << 20
	DefaultAdmissionPollInterval  = 100 * time.Millisecond
	DefaultAdmissionBand          = "standard"
	DefaultAdmissionMaxWait       = 30 * time.Second
)

// DefaultAdmissionBands are the bands of an admission section that names none.
func DefaultAdmissionBands() map[string]AdmissionBand {
	return map[string]AdmissionBand{
		"interactive": {Priority: 300, MaxWait: 10 * time.Second},
		"standard":    {Priority: 200, MaxWait: 30 * time.Second},
		"batch":       {Priority: 100, MaxWait: 120 * time.Second, Sheddable: true, MaxShare: 0.75},
	}
}

func (a *Admission) setDefaults() {
	setDefault(&a.MaxQueue, DefaultAdmissionMaxQueue)
	setDefault(&a.MaxQueueBytes, DefaultAdmissionMaxQueueBytes)
	setDefault(&a.MaxUtilization, 1)
	setDefault(&a.PollInterval, DefaultAdmissionPollInterval)
	setDefault(&a.DefaultBand, DefaultAdmissionBand)
	if len(a.Bands) == 0 {
		a.Bands = DefaultAdmissionBands()
	}
	for name, b := range a.Bands {
		setDefault(&b.MaxWait, DefaultAdmissionMaxWait)
		setDefault(&b.MaxShare, 1)
		a.Bands[name] = b
	}
}

func (c *Config) validateAdmission(errs *Errors) {
	a := &c.Admission
	if a.MaxQueue < 0 {
		errs.add("admission.max_queue", "must be positive")
	}
	if a.MaxQueueBytes < 0 {
		errs.add("admission.max_queue_bytes", "must be positive")
	}
	if a.MaxUtilization < 0 || a.MaxUtilization > 1 {
		errs.add("admission.max_utilization", "must be between 0 and 1, got %g", a.MaxUtilization)
	}
	if a.PollInterval < 0 {
		errs.add("admission.poll_interval", "must be positive")
	}
	if _, ok := a.Bands[a.DefaultBand]; !ok {
		errs.add("admission.default_band", "%q is not one of admission.bands", a.DefaultBand)
	}
	prio := map[int]string{}
	for _, name := range sortedKeys(a.Bands) {
		b := a.Bands[name]
		p := "admission.bands." + name
		if o, dup := prio[b.Priority]; dup {
			errs.add(p+".priority", "%d is also the priority of band %s", b.Priority, o)
		}
		prio[b.Priority] = name
		if b.MaxWait < 0 {
			errs.add(p+".max_wait", "must be positive")
		}
		if b.MaxShare < 0 || b.MaxShare > 1 {
			errs.add(p+".max_share", "must be above 0 and at most 1, got %g", b.MaxShare)
		}
	}
	for i, k := range c.Keys {
		p := fmt.Sprintf("keys[%d]", i)
		if k.Priority != "" && !a.hasBand(k.Priority) {
			errs.add(p+".priority", "%q is not one of admission.bands", k.Priority)
		}
		for j, b := range k.AllowPriority {
			if b != "*" && !a.hasBand(b) {
				errs.add(fmt.Sprintf("%s.allow_priority[%d]", p, j), "%q is not one of admission.bands (or \"*\")", b)
			}
		}
		if k.Weight < 0 {
			errs.add(p+".weight", "must be positive")
		}
	}
}

func (a *Admission) hasBand(name string) bool {
	_, ok := a.Bands[name]
	return ok
}

// AdmissionCap is how many requests the engine serves at once, for the admission queue: its
// max_concurrency, or a sim's sim.max_concurrency; 0 when nothing caps it.
func (e *Engine) AdmissionCap() int {
	if e.MaxConcurrency > 0 {
		return e.MaxConcurrency
	}
	if e.Kind == KindSim {
		return e.Sim.MaxConcurrency
	}
	return 0
}

// SortedBands returns the admission bands' names, highest priority first.
func (a *Admission) SortedBands() []string {
	names := sortedKeys(a.Bands)
	slices.SortStableFunc(names, func(x, y string) int { return a.Bands[y].Priority - a.Bands[x].Priority })
	return names
}
