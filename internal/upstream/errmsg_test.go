package upstream

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
)

func TestSanitize(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"plain message", 100, "plain message"},
		{"line\nbreak\tand  spaces ", 100, "line break and spaces"},
		{"nul\x00 bell\a esc\x1b[31m", 100, "nul bell esc[31m"},
		{"bad utf-8 \xff\xfe here", 100, "bad utf-8 here"},
		{"\u2028sep\u2029arated", 100, "sep arated"},
		{strings.Repeat("a", 20), 10, strings.Repeat("a", 10) + "…"},
		{strings.Repeat("é", 10), 11, strings.Repeat("é", 5) + "…"},
		{"a b c d e f", 4, "a b…"},
	}
	for _, tt := range tests {
		if got := Sanitize(tt.in, tt.max); got != tt.want {
			t.Errorf("Sanitize(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Sanitize("engine error (status 500): overloaded", MaxReason) }); n != 0 {
		t.Errorf("Sanitize allocates %v times for a clean message, want 0", n)
	}
}

func TestCheckContentType(t *testing.T) {
	tests := []struct {
		ct     string
		stream bool
		ok     bool
	}{
		{"application/json", false, true},
		{"application/json; charset=utf-8", false, true},
		{"Application/JSON", false, true},
		{"application/problem+json", false, true},
		{"application/json", true, true}, // read, then refused unless an error object
		{"text/event-stream", true, true},
		{"text/event-stream;charset=utf-8", true, true},
		{"text/event-stream", false, false},
		{"text/html; charset=utf-8", false, false},
		{"text/html", true, false},
		{"text/plain", false, false},
		{"", false, false},
	}
	for _, tt := range tests {
		err := CheckContentType(tt.ct, tt.stream)
		var ae *apierr.Error
		if (err == nil) != tt.ok || err != nil && (!errors.As(err, &ae) || ae.Kind != apierr.BadGateway || !errors.Is(err, ErrMalformed)) {
			t.Errorf("CheckContentType(%q, stream=%v) = %v, want ok=%v (else a 502 of ErrMalformed)", tt.ct, tt.stream, err, tt.ok)
		}
	}
}

// TestEngineErrorBody: an engine's error answer becomes a message naming its status, with the
// reason of a well-formed JSON error (cleaned, bounded, the credential redacted) and nothing of
// any other body; the whole body goes to the log, the credential redacted there too.
func TestEngineErrorBody(t *testing.T) {
	const key = "sk-test-123456" // newTestClient's credential
	tests := []struct {
		name, ct, body string
		status         int
		want           string
		notWant        []string
	}{
		{"html", "text/html", "<html><pre>Traceback: /home/build/secret/app.py " + key + "</pre></html>", 500,
			"", []string{"secret", "html", "Traceback", key}},
		{"json", "application/json", `{"error":{"message":"bad\nthing ` + key + ` at postgres://admin:pw@10.1.1.1/prod"}}`, 503,
			"[redacted] at postgres://admin:pw@10.1.1.1/prod", []string{key, "postgres", "10.1.1.1", "bad"}},
		{"escaped key", "application/json", `{"error":{"message":"bad key sk-test-\u0031\u00323456"}}`, 401,
			"bad key [redacted]", []string{key, "bad key"}},
		{"long json", "application/json", `{"error":{"message":"` + strings.Repeat("x", 1000) + `"}}`, 400, strings.Repeat("x", 200), []string{"xxx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			s := newRawServer(t, func(conn net.Conn, _ *http.Request) bool {
				_, _ = conn.Write([]byte("HTTP/1.1 " + strconv.Itoa(tt.status) + " X\r\nContent-Type: " + tt.ct +
					"\r\nContent-Length: " + strconv.Itoa(len(tt.body)) + "\r\n\r\n" + tt.body))
				return true
			})
			c := newTestClient(t, "http://"+s.addr, config.Timeouts{},
				Options{Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			_, err := call(context.Background(), c, false)
			var ae *apierr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an *apierr.Error", err)
			}
			// The client's message is layer0's, naming the engine and its status; the engine's
			// words, redacted and bounded, are in the cause (for the access log) only.
			if want := "engine test answered an error (status " + strconv.Itoa(tt.status) + ")"; !strings.HasPrefix(ae.Message, want) {
				t.Errorf("got message %q, want %q…", ae.Message, want)
			}
			if cause := ae.Cause.Error(); !strings.Contains(cause, tt.want) || strings.Contains(cause, key) || len(cause) > MaxReason+64 {
				t.Errorf("got cause %q, want the engine's words %q, redacted and bounded", cause, tt.want)
			}
			for _, s := range tt.notWant {
				if strings.Contains(ae.Message, s) {
					t.Errorf("the message %q holds %q", ae.Message, s)
				}
			}
			l := log.String()
			if strings.Contains(l, key) || !strings.Contains(l, `"status":`+strconv.Itoa(tt.status)) || !strings.Contains(l, `"engine":"test"`) {
				t.Errorf("the log line is not the body, redacted:\n%s", l)
			}
			if tt.name == "html" && !strings.Contains(l, "/home/build/secret/app.py") {
				t.Errorf("the log lacks the body:\n%s", l)
			}
		})
	}
}

// An engine URL with a password that cannot be used is refused without printing the password.
func TestNewNeverPrintsThePassword(t *testing.T) {
	_, err := New("e", config.Engine{Kind: config.KindOpenAI, URL: "http://user:hunter2@10.0.0.5:8000"}, Options{})
	if err == nil {
		t.Fatal("a URL with userinfo was accepted")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the password is in the error: %v", err)
	}
}
