package config

import "time"

// Responses configures the OpenAI Responses API's stored responses (store and
// previous_response_id, GET and DELETE /v1/responses/{id}), each owned by the API key that
// created it, kept in this process's memory. Read at start; a reload does not change it.
type Responses struct {
	// TTL is how long a stored response is kept after it was made. Default 1h.
	TTL time.Duration `yaml:"ttl"`
	// MaxBytes bounds the memory the stored responses of this process hold, in bytes: the oldest
	// go first beyond it. Default 67108864 (64 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
}

// Defaults of the responses section.
const (
	DefaultResponsesTTL      = time.Hour
	DefaultResponsesMaxBytes = 64 << 20
)

func (r *Responses) setDefaults() {
	if r.TTL == 0 {
		r.TTL = DefaultResponsesTTL
	}
	if r.MaxBytes == 0 {
		r.MaxBytes = DefaultResponsesMaxBytes
	}
}

func (r *Responses) validate(errs *Errors) {
	if r.TTL < 0 {
		errs.add("responses.ttl", "must not be negative")
	}
	if r.MaxBytes < 0 {
		errs.add("responses.max_bytes", "must not be negative")
	}
}
