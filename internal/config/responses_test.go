package config

import (
	"strings"
	"testing"
	"time"
)

func TestResponsesSection(t *testing.T) {
	c, err := Parse([]byte("responses: {ttl: 10m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Responses.TTL != 10*time.Minute || c.Responses.MaxBytes != DefaultResponsesMaxBytes || c.Responses.Shared {
		t.Errorf("got %+v, want ttl 10m and the default bound", c.Responses)
	}
	tests := []struct{ text, want string }{
		{"responses: {ttl: -1s}\n", "responses.ttl"},
		{"responses: {max_bytes: -1}\n", "responses.max_bytes"},
		{"responses: {shared: true}\n", "responses.shared"},
		{"engines: {a: {kind: anthropic, url: 'http://x', responses: true}}\nmodels: {m: {engines: [a]}}\n", "engines.a.responses"},
	}
	for _, tt := range tests {
		if _, err := Parse([]byte(tt.text)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error naming %s", tt.text, err, tt.want)
		}
	}
}
