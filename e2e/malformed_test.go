package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMalformedOverHTTP sends broken requests through a real listener and checks the status, the
// Anthropic error type, a message naming what is wrong, and the headers every error carries. The
// decoder's own table (internal/wire/anthropic) covers each field; this one covers what only the
// server sees: methods, paths, body limits, and that the process keeps serving afterwards.
func TestMalformedOverHTTP(t *testing.T) {
	base := startGateway(t, "server: {max_body_bytes: 4096}\n")
	ok := `{"model":"sim","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, method, path, body string
		status                   int
		typ, mention             string
	}{
		{"not json", "POST", "/v1/messages", `{"model":`, 400, "invalid_request_error", "invalid JSON"},
		{"invalid utf-8", "POST", "/v1/messages", "{\"model\":\"sim\xff\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 400, "invalid_request_error", "model: string is not valid UTF-8"},
		{"unknown model", "POST", "/v1/messages", strings.Replace(ok, `"sim"`, `"gpt-9"`, 1), 404, "not_found_error", `model: "gpt-9" not found`},
		{"bad role", "POST", "/v1/messages", strings.Replace(ok, `"user"`, `"robot"`, 1), 400, "invalid_request_error", "messages.0.role"},
		{"huge max_tokens", "POST", "/v1/messages", strings.Replace(ok, `5`, `1e99`, 1), 400, "invalid_request_error", "max_tokens"},
		{"temperature out of range", "POST", "/v1/messages", strings.Replace(ok, `"max_tokens"`, `"temperature":3,"max_tokens"`, 1), 400, "invalid_request_error", "temperature"},
		{"over the body limit", "POST", "/v1/messages", `{"model":"sim","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large", "the limit is 4096 bytes"},
		{"empty body", "POST", "/v1/messages", ``, 400, "invalid_request_error", "body"},
		{"wrong method", "GET", "/v1/messages", ``, 405, "invalid_request_error", "method not allowed"},
		{"unknown path", "POST", "/v1/complete", ok, 404, "not_found_error", "no such endpoint"},
		{"count_tokens bad", "POST", "/v1/messages/count_tokens", `{"model":"sim"}`, 400, "invalid_request_error", "messages"},
		{"models bad limit", "GET", "/v1/models?limit=0", ``, 400, "invalid_request_error", "limit"},
		{"stream not bool", "POST", "/v1/messages", strings.Replace(ok, `"max_tokens"`, `"stream":"yes","max_tokens"`, 1), 400, "invalid_request_error", "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("content-type", "application/json")
			req.Header.Set("anthropic-version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var body struct {
				Type  string `json:"type"`
				Error struct {
					Type, Message string
				} `json:"error"`
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("error body is not JSON: %q", raw)
			}
			if resp.StatusCode != tt.status || body.Type != "error" || body.Error.Type != tt.typ {
				t.Errorf("got %d %s/%s, want %d error/%s (%s)", resp.StatusCode, body.Type, body.Error.Type, tt.status, tt.typ, raw)
			}
			if !strings.Contains(body.Error.Message, tt.mention) {
				t.Errorf("message %q does not mention %q", body.Error.Message, tt.mention)
			}
			if id := resp.Header.Get("request-id"); !strings.HasPrefix(id, "L0-") || id != body.RequestID {
				t.Errorf("request-id header %q, body %q", id, body.RequestID)
			}
			for _, h := range []string{"X-Error-Code", "X-Processing-Time", "X-Response-Time", "X-Request-ID"} {
				if resp.Header.Get(h) == "" {
					t.Errorf("missing header %s", h)
				}
			}
		})
	}
	// Still serving.
	resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the bad requests: got %d, want 200", resp.StatusCode)
	}
}
