package main

import (
	"bytes"
	"errors"
	"regexp"
	"testing"

	"github.com/layer0ai/layer0/internal/auth"
)

func TestRunKeysNew(t *testing.T) {
	var out bytes.Buffer
	if err := runKeys([]string{"new"}, &out); err != nil {
		t.Fatalf("runKeys: %v", err)
	}
	m := regexp.MustCompile(`^key: (l0-[0-9A-Za-z]{43})\nhash: ([0-9a-f]{64})\n$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("got %q, want a key line and a hash line", out.String())
	}
	if got := auth.HashHex(m[1]); got != m[2] {
		t.Errorf("got hash %s, want SHA-256 of the key %s", m[2], got)
	}
}

func TestRunKeysUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"old"}, {"new", "extra"}} {
		var out bytes.Buffer
		err := runKeys(args, &out)
		if err == nil || err.Error() != keysUsage || out.Len() != 0 {
			t.Errorf("runKeys(%q): got (%v, %q), want the usage error and no output", args, err, out.String())
		}
	}
}

type failWriter struct{}

var errWrite = errors.New("closed")

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestRunKeysWriteError(t *testing.T) {
	if err := runKeys([]string{"new"}, failWriter{}); !errors.Is(err, errWrite) {
		t.Errorf("got %v, want the write error", err)
	}
}
