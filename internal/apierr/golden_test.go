package apierr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// written is one error layer0 writes, and what each client format gets for it.
type written struct {
	when string
	err  *apierr.Error
	// Anthropic's format: status, error.type, and the X-Error-Code header every format carries.
	aStatus int
	aType   string
	xCode   string
	// OpenAI's format: status, error.type, error.code ("" for null).
	oStatus int
	oType   string
	oCode   string
}

// everyError lists every error layer0 writes, built as the code that writes it builds it.
func everyError() []written {
	cause := errors.New("cause")
	return []written{
		{"a request field is invalid (param names it)", apierr.Invalid("messages.1", "tool_use ids were found without tool_result blocks"),
			400, "invalid_request_error", "INVALID_REQUEST_ERROR", 400, "invalid_request_error", ""},
		{"the prompt does not fit the model's context window", &apierr.Error{Kind: apierr.InvalidRequest, Param: "messages", Code: "context_length_exceeded", Message: "too long"},
			400, "invalid_request_error", "CONTEXT_LENGTH_EXCEEDED", 400, "invalid_request_error", "context_length_exceeded"},
		{"a directive in the system prompt has a bad value, or names an offload target that is not configured", &apierr.Error{Kind: apierr.InvalidRequest, Param: "system", Code: "invalid_directive", Message: "system: directive <|temperature|> must be a number between 0 and 1, got \"3\""},
			400, "invalid_request_error", "INVALID_DIRECTIVE", 400, "invalid_request_error", "invalid_directive"},
		{"no API key", &apierr.Error{Kind: apierr.Authentication, Code: "MISSING_API_KEY", Message: "missing API key"},
			401, "authentication_error", "MISSING_API_KEY", 401, "invalid_request_error", "invalid_api_key"},
		{"a wrong API key", &apierr.Error{Kind: apierr.Authentication, Code: "INVALID_API_KEY", Message: "invalid API key"},
			401, "authentication_error", "INVALID_API_KEY", 401, "invalid_request_error", "invalid_api_key"},
		{"the key may not use the model", &apierr.Error{Kind: apierr.Permission, Param: "model", Code: "MODEL_NOT_ALLOWED", Message: "not allowed"},
			403, "permission_error", "MODEL_NOT_ALLOWED", 403, "invalid_request_error", "model_not_found"},
		{"no such model", &apierr.Error{Kind: apierr.NotFound, Param: "model", Code: "model_not_found", Message: "no model"},
			404, "not_found_error", "MODEL_NOT_FOUND", 404, "invalid_request_error", "model_not_found"},
		{"no such endpoint or embedded engine", apierr.New(apierr.NotFound, "GET /v1/x: no such endpoint"),
			404, "not_found_error", "NOT_FOUND_ERROR", 404, "invalid_request_error", ""},
		{"wrong HTTP method for the path", &apierr.Error{Kind: apierr.MethodNotAllowed, Code: "method_not_allowed", Message: "use POST"},
			405, "invalid_request_error", "METHOD_NOT_ALLOWED", 405, "invalid_request_error", "method_not_allowed"},
		{"the body is larger than the limit", &apierr.Error{Kind: apierr.RequestTooLarge, Code: "REQUEST_TOO_LARGE", Message: "too large"},
			413, "request_too_large", "REQUEST_TOO_LARGE", 413, "invalid_request_error", "request_too_large"},
		{"the headers are larger than the limit", &apierr.Error{Kind: apierr.RequestTooLarge, Code: "HEADERS_TOO_LARGE", Message: "too large"},
			413, "request_too_large", "HEADERS_TOO_LARGE", 413, "invalid_request_error", "headers_too_large"},
		{"a request or concurrency limit of layer0 is reached", &apierr.Error{Kind: apierr.RateLimit, Code: "RATE_LIMITED", Limit: apierr.LimitRequests, Message: "rate limit exceeded"},
			429, "rate_limit_error", "RATE_LIMITED", 429, "requests", "rate_limit_exceeded"},
		{"a token limit of layer0 is reached", &apierr.Error{Kind: apierr.RateLimit, Code: "RATE_LIMITED", Limit: apierr.LimitTokens, Message: "rate limit exceeded"},
			429, "rate_limit_error", "RATE_LIMITED", 429, "tokens", "rate_limit_exceeded"},
		{"the engine answered 429", openai.DecodeError(429, []byte(`{"error":{"message":"slow down"}}`)),
			429, "rate_limit_error", "RATE_LIMIT_ERROR", 429, "requests", "rate_limit_exceeded"},
		{"an internal error", apierr.From(cause),
			500, "api_error", "API_ERROR", 500, "server_error", ""},
		{"the engine failed or sent something invalid", apierr.Wrap(apierr.BadGateway, cause, "engine connection failed"),
			502, "api_error", "API_ERROR", 502, "server_error", "bad_gateway"},
		{"no engine replica can serve the model", &apierr.Error{Kind: apierr.Unavailable, Code: "NO_REPLICA", Message: "no replica"},
			503, "api_error", "NO_REPLICA", 503, "server_error", "no_replica"},
		{"the server is shutting down", &apierr.Error{Kind: apierr.Unavailable, Code: "shutting_down", Message: "shutting down"},
			503, "api_error", "SHUTTING_DOWN", 503, "server_error", "shutting_down"},
		{"the rate limiter's store is unavailable", &apierr.Error{Kind: apierr.Unavailable, Message: "rate limiter unavailable", Cause: cause},
			503, "api_error", "API_ERROR", 503, "server_error", "service_unavailable"},
		{"the engine sent no first byte in time", &apierr.Error{Kind: apierr.Timeout, Code: "FIRST_BYTE_TIMEOUT", Message: "no response"},
			504, "timeout_error", "FIRST_BYTE_TIMEOUT", 504, "server_error", "first_byte_timeout"},
		{"the engine stalled or did not finish in time", apierr.Wrap(apierr.Timeout, cause, "engine stalled"),
			504, "timeout_error", "TIMEOUT_ERROR", 504, "server_error", "timeout"},
		{"a POST body whose Content-Type is not JSON (or the binary protocol's)", &apierr.Error{Kind: apierr.UnsupportedMediaType, Code: "UNSUPPORTED_MEDIA_TYPE", Message: "send JSON"},
			415, "invalid_request_error", "UNSUPPORTED_MEDIA_TYPE", 415, "invalid_request_error", "unsupported_media_type"},
		{"the Host header names a host a loopback or admin listener does not serve (DNS rebinding)", &apierr.Error{Kind: apierr.Permission, Code: "HOST_NOT_ALLOWED", Message: "host not allowed"},
			403, "permission_error", "HOST_NOT_ALLOWED", 403, "invalid_request_error", "host_not_allowed"},
		{"the request body did not arrive within read_body_timeout, or fell under min_body_rate", &apierr.Error{Kind: apierr.RequestTimeout, Code: "REQUEST_TIMEOUT", Message: "too slow"},
			408, "timeout_error", "REQUEST_TIMEOUT", 408, "invalid_request_error", "request_timeout"},
		{"the request bodies in flight hold max_body_bytes_in_flight (with retry-after)", &apierr.Error{Kind: apierr.Unavailable, Code: "BODY_BUDGET_EXHAUSTED", Message: "too many bodies", RetryAfter: 1e9},
			503, "api_error", "BODY_BUDGET_EXHAUSTED", 503, "server_error", "body_budget_exhausted"},
		{"no such binary-protocol vocabulary", &apierr.Error{Kind: apierr.NotFound, Code: "vocab_not_found", Message: "unknown vocabulary"},
			404, "not_found_error", "VOCAB_NOT_FOUND", 404, "invalid_request_error", "vocab_not_found"},
		{"the engine is overloaded (529 or 503, or at its concurrency limit)", apierr.New(apierr.Overloaded, "overloaded"),
			529, "overloaded_error", "OVERLOADED_ERROR", 503, "server_error", "server_is_overloaded"},
	}
}

// xErrorCode is the X-Error-Code header the server sets: the error's code, else its Anthropic
// type, in upper case.
func xErrorCode(e *apierr.Error) string {
	if e.Code != "" {
		return strings.ToUpper(e.Code)
	}
	return strings.ToUpper(e.Kind.AnthropicType())
}

// TestEveryErrorGolden holds every error layer0 writes to its status, type and code in both
// client formats, and to docs/errors.md, which must list each of them.
func TestEveryErrorGolden(t *testing.T) {
	doc, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range everyError() {
		t.Run(w.when, func(t *testing.T) {
			e := w.err
			var a struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
				RequestID string `json:"request_id"`
			}
			body := anthropic.AppendError(nil, e, "L0-1")
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatalf("Anthropic body %s: %v", body, err)
			}
			if e.Status() != w.aStatus || a.Type != "error" || a.Error.Type != w.aType || a.Error.Message != e.Message || a.RequestID != "L0-1" {
				t.Errorf("Anthropic: got %d %s, want %d %q", e.Status(), body, w.aStatus, w.aType)
			}
			if got := xErrorCode(e); got != w.xCode {
				t.Errorf("X-Error-Code: got %q, want %q", got, w.xCode)
			}
			var o struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			body = openai.AppendError(nil, e)
			if err := json.Unmarshal(body, &o); err != nil {
				t.Fatalf("OpenAI body %s: %v", body, err)
			}
			code := ""
			if o.Error.Code != nil {
				code = *o.Error.Code
				if code == "" {
					t.Errorf("OpenAI: code is an empty string, want null: %s", body)
				}
			}
			param := ""
			if o.Error.Param != nil {
				param = *o.Error.Param
			}
			if openai.Status(e) != w.oStatus || o.Error.Type != w.oType || code != w.oCode || param != e.Param || o.Error.Message != e.Message {
				t.Errorf("OpenAI: got %d %s, want %d type %q code %q param %q", openai.Status(e), body, w.oStatus, w.oType, w.oCode, e.Param)
			}
			// The cause is never sent.
			if e.Cause != nil && (strings.Contains(string(body), e.Cause.Error()) ||
				strings.Contains(string(anthropic.AppendError(nil, e, "")), e.Cause.Error())) {
				t.Errorf("the cause %q reached the client", e.Cause)
			}
			// docs/errors.md has a row for it in each format.
			for _, row := range []string{
				fmt.Sprintf("| %d | `%s` | `%s` | %s |", w.aStatus, w.aType, w.xCode, w.when),
				fmt.Sprintf("| %d | `%s` | %s | %s |", w.oStatus, w.oType, docCode(w.oCode), w.when),
			} {
				if !strings.Contains(string(doc), row) {
					t.Errorf("docs/errors.md has no row %q", row)
				}
			}
		})
	}
}

func docCode(c string) string {
	if c == "" {
		return "null"
	}
	return "`" + c + "`"
}

// TestEveryErrorInStream checks the OpenAI stream's error chunk carries the same type and code as
// the error body.
func TestEveryErrorInStream(t *testing.T) {
	for _, w := range everyError() {
		var sb strings.Builder
		s := openai.NewStreamWriter(&sb)
		if err := s.WriteError(w.err); err != nil {
			t.Fatal(err)
		}
		want := "data: " + string(openai.AppendError(nil, w.err)) + "\n\n"
		if sb.String() != want {
			t.Errorf("%s: got %q, want %q", w.when, sb.String(), want)
		}
	}
}
