package config

import (
	"time"
)

// Responses configures the OpenAI Responses API's stored responses (store and
// previous_response_id, GET and DELETE /v1/responses/{id}), each owned by the API key that
// created it. They are kept in this process's memory, or in the shared Redis store (store kind
// redis) when Shared is set, so that every replica continues every conversation. TTL and
// MaxBytes are read at start; a reload does not change the memory store.
type Responses struct {
	// TTL is how long a stored response is kept after it was made. Default 1h.
	TTL time.Duration `yaml:"ttl"`
	// MaxBytes bounds the memory the stored responses of this process hold, in bytes: the oldest
	// go first beyond it. Default 67108864 (64 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// Shared keeps them in the shared Redis store (store.kind redis) instead, each expiring after
	// TTL; MaxBytes then does not apply (Redis's own memory policy does). Default false.
	Shared bool `yaml:"shared"`
}

// Defaults of the responses section.
const (
	DefaultResponsesTTL      = time.Hour
	DefaultResponsesMaxBytes = 64 << 20
)

func (r *Responses) setDefaults() {
	setDefault(&r.TTL, DefaultResponsesTTL)
	setDefault(&r.MaxBytes, DefaultResponsesMaxBytes)
}

func (r *Responses) validate(c *Config, errs *Errors) {
	notNegative(errs, "responses.ttl", r.TTL)
	notNegative(errs, "responses.max_bytes", r.MaxBytes)
	if r.Shared && c.Store.Kind != StoreRedis {
		errs.add("responses.shared", "needs the shared store (store.kind redis)")
	}
}
