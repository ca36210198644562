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
