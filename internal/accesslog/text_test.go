package accesslog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
)

// parseText reads one key=value line back: bare values end at a space, quoted ones are Go
// strings.
func parseText(t *testing.T, line string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for line != "" {
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("no '=' in %q", line)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				t.Fatalf("%s: %v in %q", k, err, rest)
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		m[k] = v
		line = strings.TrimPrefix(rest, " ")
	}
	return m
}

// The text format writes the JSON record's fields in order as key=value, quoting what would not
// read back as one value.
func TestTextFormat(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, 16, Text)
	l.Write(&Entry{Record: pipeline.Record{RequestID: "L0-x", Status: 502, Model: "chat", Fallbacks: []string{"overloaded", "timeout"},
		Cause: errors.New(`engine "a" said: no = never`)}, Method: "POST", Path: "/v1/messages", Key: "team a", Duration: 1500 * time.Microsecond})
	l.Close()
	line := strings.TrimSuffix(buf.String(), "\n")
	if strings.Contains(line, "\n") || strings.HasPrefix(line, "{") {
		t.Fatalf("want one text line, got %q", buf.String())
	}
	if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=INFO msg=request request_id=L0-x method=POST ") {
		t.Errorf("fields out of order: %q", line)
	}
	m := parseText(t, line)
	for k, want := range map[string]string{"status": "502", "model": "chat", "key": "team a", "error": `engine "a" said: no = never`,
		"duration_ms": "1.5", "path": "/v1/messages", "fallbacks": `["overloaded","timeout"]`} {
		if m[k] != want {
			t.Errorf("%s: got %q, want %q (line %q)", k, m[k], want, line)
		}
	}
}

// Reopen moves the writes to a new file at the path, after the old one was renamed.
func TestFileReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte("one\n")) //nolint:errcheck // read back below
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("two\n")) //nolint:errcheck // still the renamed file, until Reopen
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("three\n")) //nolint:errcheck
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if string(old) != "one\ntwo\n" || string(cur) != "three\n" {
		t.Errorf("rotated %q, new %q", old, cur)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := f.Reopen(); err == nil {
		t.Error("reopening a path that is a directory: no error")
	}
	if _, err := f.Write([]byte("four\n")); err != nil {
		t.Errorf("after a failed reopen the previous file is written: %v", err)
	}
}

// TestTextQuotesUnprintable: a value with a character a terminal or a log viewer acts on —
// C1 controls (U+009B starts an escape sequence), the Unicode line and paragraph separators,
// invalid UTF-8 — is written quoted and escaped, never bare.
func TestTextQuotesUnprintable(t *testing.T) {
	for _, v := range []string{"/v1/a\u009b2J", "/v1/a\u2028b", "/v1/a\u0085b", "/v1/a\xffb"} {
		line := string(appendTextValue(nil, v))
		if !strings.HasPrefix(line, `"`) {
			t.Errorf("%q written bare: %q", v, line)
			continue
		}
		for _, r := range line {
			if !strconv.IsPrint(r) {
				t.Errorf("%q written with %U in it: %q", v, r, line)
			}
		}
	}
}
