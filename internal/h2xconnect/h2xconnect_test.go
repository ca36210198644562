package h2xconnect

import (
	"os"
	"strings"
	"testing"
)

func TestWith(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "http2xconnect=1"},
		{"http2debug=1", "http2debug=1,http2xconnect=1"},
		{"http2xconnect=0", "http2xconnect=0"},
		{"a=1, http2xconnect=0", "a=1, http2xconnect=0"},
		{"http2xconnect=1", "http2xconnect=1"},
	}
	for _, tt := range tests {
		if got := With(tt.in); got != tt.want {
			t.Errorf("With(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestInitSetsEnvironment(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=") {
		t.Fatalf("GODEBUG after init: %q", os.Getenv("GODEBUG"))
	}
}
