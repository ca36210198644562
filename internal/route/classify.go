package route

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine"
)

// Reasons a request moves to another replica or down its fallback chain. They are the values of
// the reason label of layer0_fallback_total, so the set is fixed.
const (
	ReasonRateLimit     = "rate_limit"     // the engine answered 429
	ReasonOverloaded    = "overloaded"     // 529 or 503: the engine is saturated
	ReasonServerError   = "server_error"   // any other 5xx, or an unclassified failure
	ReasonTimeout       = "timeout"        // the engine did not answer in time
	ReasonOOM           = "oom"            // the engine ran out of memory
	ReasonContextLength = "context_length" // the input does not fit the model's context window
	ReasonNetwork       = "network"        // the connection to the engine failed
	ReasonUnavailable   = "unavailable"    // no replica could take the request (down, ejected, breaker open)
	ReasonUtilization   = "utilization"    // every replica was above the utilisation threshold
	ReasonCanceled      = "canceled"       // the client went away or stopped reading; never retried
	ReasonClientError   = "client_error"   // the request itself is at fault; never retried
)

// Classify maps an engine error to a fallback reason and says whether another replica or model
// could succeed where this one failed. Messages are checked first, because engines report
// out-of-memory and context overflow under many statuses ("CUDA out of memory" as a 500, "This
// model's maximum context length is 4096 tokens" as a 400); then the apierr kind; then network
// and context errors. A failure to write to the client (engine.ErrClientWrite) is a cancellation
// whatever else it wraps: a client that stops reading says nothing about the engine. A nil
// error is ("", false).
func Classify(err error) (reason string, retryable bool) {
	if err == nil {
		return "", false
	}
	var e *apierr.Error
	isAPI := errors.As(err, &e)
	if errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrClientWrite) || (isAPI && e.Code == "CANCELED") {
		return ReasonCanceled, false
	}
	msg := strings.ToLower(err.Error())
	if isAPI {
		msg += " " + strings.ToLower(e.Code)
	}
	switch {
	case containsWord(msg, "oom") || strings.Contains(msg, "out of memory") || strings.Contains(msg, "outofmemory"):
		return ReasonOOM, true
	case apierr.ContextOverflow(msg):
		return ReasonContextLength, true
	}
	if isAPI {
		switch e.Kind {
		case apierr.RateLimit:
			return ReasonRateLimit, true
		case apierr.Overloaded:
			return ReasonOverloaded, true
		case apierr.Timeout:
			return ReasonTimeout, true
		case apierr.Unavailable:
			return ReasonUnavailable, true
		case apierr.BadGateway:
			if ne := netError(err); ne != "" {
				return ne, true
			}
			return ReasonServerError, true
		case apierr.API:
			if ne := netError(err); ne != "" {
				return ne, true
			}
			return ReasonServerError, true
		}
		return ReasonClientError, false
	}
	if ne := netError(err); ne != "" {
		return ne, true
	}
	return ReasonServerError, true
}

// netError names a transport failure, or returns "".
func netError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return ReasonTimeout
		}
		return ReasonNetwork
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return ReasonNetwork
	}
	return ""
}

// containsWord reports whether w occurs in s not surrounded by letters ("oom", not "room").
func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !isLetter(s[j-1])
		after := j+len(w) == len(s) || !isLetter(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
	return false
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// Fault reports whether a failure with this reason counts against the replica's health (outlier
// ejection and the breaker). Rate limits, context overflow, client errors and cancellations say
// nothing about the replica.
func Fault(reason string) bool {
	switch reason {
	case ReasonOverloaded, ReasonServerError, ReasonTimeout, ReasonOOM, ReasonNetwork, ReasonUnavailable:
		return true
	}
	return false
}
