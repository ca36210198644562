package apierr

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestKinds(t *testing.T) {
	tests := []struct {
		kind   Kind
		status int
		typ    string
	}{
		{API, 500, "api_error"},
		{InvalidRequest, 400, "invalid_request_error"},
		{Authentication, 401, "authentication_error"},
		{Permission, 403, "permission_error"},
		{NotFound, 404, "not_found_error"},
		{RequestTooLarge, 413, "request_too_large"},
		{RateLimit, 429, "rate_limit_error"},
		{Timeout, 504, "timeout_error"},
		{Overloaded, 529, "overloaded_error"},
		{BadGateway, 502, "api_error"},
		{Unavailable, 503, "api_error"},
		{MethodNotAllowed, 405, "invalid_request_error"},
	}
	for _, tt := range tests {
		if got := tt.kind.Status(); got != tt.status {
			t.Errorf("kind %d status: got %d, want %d", tt.kind, got, tt.status)
		}
		if got := tt.kind.AnthropicType(); got != tt.typ {
			t.Errorf("kind %d type: got %q, want %q", tt.kind, got, tt.typ)
		}
	}
}

func TestKindForStatus(t *testing.T) {
	tests := map[int]Kind{400: InvalidRequest, 422: InvalidRequest, 401: Authentication, 403: Permission,
		404: NotFound, 413: RequestTooLarge, 429: RateLimit, 408: Timeout, 504: Timeout, 529: Overloaded,
		503: Overloaded, 500: BadGateway, 502: BadGateway, 418: API}
	for status, want := range tests {
		if got := KindForStatus(status); got != want {
			t.Errorf("KindForStatus(%d): got %d, want %d", status, got, want)
		}
	}
}

func TestFrom(t *testing.T) {
	e := Invalid("messages.0.role", "must be %q", "user")
	wrapped := fmt.Errorf("stage: %w", e)
	if got := From(wrapped); got != e {
		t.Errorf("From(wrapped): got %v, want the original", got)
	}
	if got, want := e.Message, `messages.0.role: must be "user"`; got != want {
		t.Errorf("message: got %q, want %q", got, want)
	}
	if got := From(context.DeadlineExceeded); got.Kind != Timeout {
		t.Errorf("deadline: got kind %d, want Timeout", got.Kind)
	}
	secret := errors.New("dial tcp 10.0.0.1: token=abc")
	got := From(secret)
	if got.Kind != API || got.Message != "internal error" || !errors.Is(got, secret) {
		t.Errorf("unclassified: got %+v, want a 500 hiding its cause", got)
	}
	if From(nil) != nil {
		t.Error("From(nil) != nil")
	}
}
