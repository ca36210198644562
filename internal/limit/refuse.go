package limit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// concRefused refuses a request because n requests of the scope are in flight.
func (s *scope) concRefused(n int64) *apierr.Error {
	return s.refuse(fmt.Sprintf("%d concurrent requests", s.conc.max), fmt.Sprintf("%d requests are in flight", n),
		time.Second)
}

// rateRefused refuses a request because the cell r, of dimension what, whose TAT is tat, has not
// one unit left.
func (s *scope) rateRefused(r *rateSlot, what string, now time.Time, tat int64) *apierr.Error {
	_, _, wait := gcraTake(tat, now.UnixNano(), r.rate, 1)
	if r == &s.out {
		return s.outRefused(wait)
	}
	return s.refuse(fmt.Sprintf("%d %s per minute", r.rate.Limit, what), "", wait)
}

// errOutputSpent is the cause of a refusal by the output-token limit: the 429's OpenAI tokens
// headers then describe output tokens, the limit that refused, not input tokens.
var errOutputSpent = errors.New("limit: output tokens spent")

// outRefused refuses a request because the scope's output tokens are spent, to be retried after
// retry.
func (s *scope) outRefused(retry time.Duration) *apierr.Error {
	e := s.refuse(fmt.Sprintf("%d output tokens per minute", s.out.rate.Limit), "", retry)
	e.Cause = errOutputSpent
	return e
}

// inRefused refuses a request's input tokens, to be retried after retry (never, when negative).
func (s *scope) inRefused(input int64, retry time.Duration) *apierr.Error {
	what := fmt.Sprintf("%d input tokens per minute", s.in.rate.Limit)
	if retry < 0 {
		return s.tooBig(input, what)
	}
	return s.refuse(what, fmt.Sprintf("this request needs about %d", input), retry)
}

// whose names the scope in a client message.
func (s *scope) whose() string {
	if s.global {
		return "the server's limit (shared by all keys)"
	}
	return "this API key's limit"
}

func (s *scope) refuse(limit, detail string, retry time.Duration) *apierr.Error {
	retry = max(retry, time.Millisecond)
	msg := "rate limit exceeded: " + s.whose() + " of " + limit + " is reached"
	if detail != "" {
		msg += " (" + detail + ")"
	}
	msg += "; retry after " + roundUp(retry).String()
	counts := apierr.LimitRequests // the limit's own words say what it counts
	const tpm = "tokens per minute"
	if len(limit) >= len(tpm) && limit[len(limit)-len(tpm):] == tpm {
		counts = apierr.LimitTokens
	}
	return &apierr.Error{Kind: apierr.RateLimit, Message: msg, Code: "RATE_LIMITED", RetryAfter: retry,
		Limit: counts, Header: http.Header{}}
}

// tooBig refuses a request that can never fit: retrying will not help, and x-should-retry says so
// to the official SDKs.
func (s *scope) tooBig(input int64, limit string) *apierr.Error {
	msg := fmt.Sprintf("rate limit exceeded: this request has about %d input tokens, more than %s of %s",
		input, s.whose(), limit)
	return &apierr.Error{Kind: apierr.RateLimit, Message: msg, Code: "RATE_LIMITED", Limit: apierr.LimitTokens,
		Header: http.Header{"X-Should-Retry": {"false"}}}
}

// storeError answers a request the store could not count: 503, to be retried after a second
// (a shared store that is down is probed every 100ms and used again as soon as it answers).
func storeError(err error) *apierr.Error {
	return &apierr.Error{Kind: apierr.Unavailable, Message: "rate limiter unavailable", RetryAfter: time.Second,
		Cause: fmt.Errorf("limit: store: %w", err)}
}

// roundUp rounds a wait up to a whole second when it is longer than one, up to a millisecond
// otherwise: a client told to wait must not come back early.
func roundUp(d time.Duration) time.Duration {
	unit := time.Millisecond
	if d > time.Second {
		unit = time.Second
	}
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
}
