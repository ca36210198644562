package upstream

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"7"}}, 1500 * time.Millisecond},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{}, 0},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.h); got != tt.want {
			t.Errorf("got %v for %v, want %v", got, tt.h, tt.want)
		}
	}
	date := http.Header{"Retry-After": {time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}
	if got := RetryAfter(date); got < 59*time.Minute || got > time.Hour {
		t.Errorf("got %v for a date an hour ahead", got)
	}
}

func TestSecret(t *testing.T) {
	s := Secret{"sk-abcdef123456"}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s), fmt.Sprintf("%+v", struct{ K Secret }{s})} {
		if strings.Contains(out, "sk-abc") {
			t.Errorf("got %q", out)
		}
	}
	if got := s.Redact("bad key sk-abcdef123456!"); got != "bad key [redacted]!" {
		t.Errorf("got %q", got)
	}
}

// An engine that echoes the key inside JSON may spell it with escapes: it is redacted whole,
// however spelt, once or twice escaped, and the text around it is left as it was.
func TestSecretRedactsEscaped(t *testing.T) {
	s := Secret{"sk/up/abc123"}
	tests := []struct{ in, want string }{
		{`{"message":"bad key sk\/up\/abc123"}`, `{"message":"bad key [redacted]"}`},
		{`{"message":"bad key \u0073k/up/abc123 and sk/up/abc123"}`, `{"message":"bad key [redacted] and [redacted]"}`},
		{`{"m":"\u0073\u006b\/up\/abc12\u0033!"}`, `{"m":"[redacted]!"}`},
		{`"{\"message\":\"key \\u0073k\\/up\\/abc123\"}"`, `"{\"message\":\"key [redacted]\"}"`},
		{`no key here, \u0073k/up/abc12 is another one`, `no key here, \u0073k/up/abc12 is another one`},
		{`a stray \ and \u00zz`, `a stray \ and \u00zz`},
	}
	for _, tt := range tests {
		if got := s.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%s):\n got %s\nwant %s", tt.in, got, tt.want)
		}
	}
}
