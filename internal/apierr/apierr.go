// Package apierr is the one error type stages return and only the server writes: a Kind that
// fixes the HTTP status and the error type each client format sends, a message safe to show the
// client, and a wrapped internal cause that is logged but never sent.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Kind classifies an error for the wire.
type Kind uint8

// Error kinds, one per Anthropic error type.
const (
	API                  Kind = iota // 500 api_error; the zero value, for anything unclassified
	InvalidRequest                   // 400 invalid_request_error
	Authentication                   // 401 authentication_error
	Permission                       // 403 permission_error
	NotFound                         // 404 not_found_error
	RequestTooLarge                  // 413 request_too_large
	RateLimit                        // 429 rate_limit_error
	Timeout                          // 504 timeout_error
	Overloaded                       // 529 overloaded_error
	BadGateway                       // 502 api_error: the engine failed
	Unavailable                      // 503 api_error: no engine can serve
	MethodNotAllowed                 // 405 invalid_request_error: wrong HTTP method for the path
	RequestTimeout                   // 408 timeout_error: the client was too slow sending its request
	UnsupportedMediaType             // 415 invalid_request_error: the body's Content-Type is not one the endpoint reads
)

// Status is the HTTP status code of the kind.
func (k Kind) Status() int {
	switch k {
	case InvalidRequest:
		return http.StatusBadRequest
	case Authentication:
		return http.StatusUnauthorized
	case Permission:
		return http.StatusForbidden
	case NotFound:
		return http.StatusNotFound
	case RequestTooLarge:
		return http.StatusRequestEntityTooLarge
	case RateLimit:
		return http.StatusTooManyRequests
	case Timeout:
		return http.StatusGatewayTimeout
	case Overloaded:
		return 529
	case BadGateway:
		return http.StatusBadGateway
	case Unavailable:
		return http.StatusServiceUnavailable
	case MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case RequestTimeout:
		return http.StatusRequestTimeout
	case UnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	}
	return http.StatusInternalServerError
}

// AnthropicType is the error type the Anthropic API sends for the kind.
func (k Kind) AnthropicType() string {
	switch k {
	case InvalidRequest, MethodNotAllowed, UnsupportedMediaType:
		return "invalid_request_error"
	case Authentication:
		return "authentication_error"
	case Permission:
		return "permission_error"
	case NotFound:
		return "not_found_error"
	case RequestTooLarge:
		return "request_too_large"
	case RateLimit:
		return "rate_limit_error"
	case Timeout, RequestTimeout:
		return "timeout_error"
	case Overloaded:
		return "overloaded_error"
	}
	return "api_error"
}

// KindForStatus maps an HTTP status (from an engine) to the kind a client should see.
func KindForStatus(status int) Kind {
	switch {
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return InvalidRequest
	case status == http.StatusUnauthorized:
		return Authentication
	case status == http.StatusForbidden:
		return Permission
	case status == http.StatusNotFound:
		return NotFound
	case status == http.StatusRequestEntityTooLarge:
		return RequestTooLarge
	case status == http.StatusTooManyRequests:
		return RateLimit
	case status == http.StatusGatewayTimeout || status == http.StatusRequestTimeout:
		return Timeout
	case status == 529 || status == http.StatusServiceUnavailable:
		return Overloaded
	case status >= 500:
		return BadGateway
	}
	return API
}

// ErrEngineSaid is in the cause of an *Error whose Message holds an engine's own words (the
// message of an engine's error answer, error event or error frame), which may name its
// internal addresses or credentials: the engine's client replaces that Message with a stable
// one of its own before the error goes anywhere else, keeping the words for the log.
var ErrEngineSaid = errors.New("apierr: the message is the engine's own")

// EngineSaid returns cause marked with ErrEngineSaid (ErrEngineSaid itself when cause is nil).
func EngineSaid(cause error) error {
	if cause == nil {
		return ErrEngineSaid
	}
	return fmt.Errorf("%w: %w", ErrEngineSaid, cause)
}

// ContextOverflow recognises, in a lower-case message, the context-length errors of the engines
// layer0 fronts: Anthropic ("prompt is too long: N tokens > M maximum"), OpenAI and vLLM
// ("maximum context length is", code context_length_exceeded), llama.cpp ("exceeds the
// available context size"), TGI ("must have less than N tokens").
func ContextOverflow(msg string) bool {
	for _, s := range []string{
		"context_length_exceeded",
		"context length",
		"context window",
		"context size",
		"prompt is too long",
		"input is too long",
		"must have less than",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// What a rate limit counts, for Error.Limit.
const (
	LimitRequests = "requests"
	LimitTokens   = "tokens"
)

// Error is the error every stage returns. Message is sent to the client; Cause is not.
type Error struct {
	Kind    Kind
	Message string
	// Param names the offending request field, when there is one (OpenAI's "param").
	Param string
	// Code is a machine-readable code sent as X-Error-Code (and OpenAI's "code"); optional.
	Code string
	// Limit says what the limit behind a RateLimit error counts: LimitRequests (the default
	// when empty) or LimitTokens. OpenAI's format sends it as the error type, as the OpenAI API
	// does.
	Limit string
	// RetryAfter, when positive, is sent as retry-after.
	RetryAfter time.Duration
	// Header holds extra response headers (rate-limit state, for example); optional.
	Header http.Header
	// Cause is the internal error, logged and never sent.
	Cause error
}

// Error implements error. It includes the cause, so it is for logs, not for clients.
func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Message + ": " + e.Cause.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Status is the HTTP status of the error.
func (e *Error) Status() int { return e.Kind.Status() }

// New returns an error of the kind with a formatted client-safe message.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a 400 invalid_request_error about the request field param.
func Invalid(param, format string, args ...any) *Error {
	return &Error{Kind: InvalidRequest, Param: param, Message: param + ": " + fmt.Sprintf(format, args...)}
}

// Wrap returns an error of the kind with a client-safe message and an internal cause.
func Wrap(kind Kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Cause: cause}
}

// IsRateLimit reports whether err is, or wraps, a refusal of a rate limit (an *Error of kind
// RateLimit): what a request's record calls rate limited.
func IsRateLimit(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == RateLimit
}

// From returns err as an *Error. Context errors become 504 timeout or a 499-style cancel
// (reported as api_error); anything unclassified becomes a 500 whose message hides the cause.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: Timeout, Message: "request timed out", Cause: err}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Kind: API, Message: "request canceled", Cause: err, Code: "CANCELED"}
	}
	return &Error{Kind: API, Message: "internal error", Cause: err}
}
