package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
)

// layer0 version and --version print the build's fields, the Go version being this one.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
			t.Fatalf("layer0 %s: exit %d, stderr %q", arg, code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"layer0 ", "\ncommit:", "\ncommit time:", "\nbuild time:", "\ngo:          " + runtime.Version() + "\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("layer0 %s: %q lacks %q", arg, out, want)
			}
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("layer0 version extra: exit %d, want 2", code)
	}
}

// keys new --name prints an entry that, pasted under keys:, is a valid configuration whose
// hash is the printed key's.
func TestKeysNewName(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"keys", "new", "--name", "team: a"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	key := regexp.MustCompile(`^# API key (l0-[0-9A-Za-z]{43}) `).FindStringSubmatch(stdout.String())
	if key == nil {
		t.Fatalf("no key in the comment: %q", stdout.String())
	}
	cfg, err := config.Parse([]byte("keys:\n" + stdout.String()))
	if err != nil {
		t.Fatalf("the entry pasted under keys: %v\n%s", err, stdout.String())
	}
	if len(cfg.Keys) != 1 || cfg.Keys[0].Name != "team: a" || cfg.Keys[0].Hash != auth.HashHex(key[1]) {
		t.Errorf("keys: %+v, want team: a with the key's hash", cfg.Keys)
	}
	for _, args := range [][]string{{"keys", "new", "--name"}, {"keys", "new", "--bogus"}, {"keys", "new", "x"}} {
		stdout.Reset()
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 || stderr.String() != keysUsage+"\n" || stdout.Len() != 0 {
			t.Errorf("layer0 %s: exit %d, stdout %q, stderr %q; want 2 and the usage line", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
	}
}

// A failing command prints one line (per configuration problem), "layer0: " once.
func TestErrorsAreOneLine(t *testing.T) {
	dir := t.TempDir()
	noEnv := filepath.Join(dir, "noenv.yaml")
	os.WriteFile(noEnv, []byte("engines:\n  e: {kind: openai, url: \"http://127.0.0.1:1\", api_key_env: L0_CLI_TEST_UNSET}\nmodels:\n  m: {engines: [e]}\n"), 0o600) //nolint:errcheck
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "check", noEnv}, "layer0: config: " + noEnv + ": upstream: engine e: environment variable L0_CLI_TEST_UNSET is empty or unset\n"},
		{[]string{"serve", "--config", noEnv}, "layer0: upstream: engine e: environment variable L0_CLI_TEST_UNSET is empty or unset\n"},
		{[]string{"config", "check", filepath.Join(dir, "missing.yaml")}, "layer0: config: open " + filepath.Join(dir, "missing.yaml") + ": no such file or directory\n"},
		{[]string{"serve", "--addr", "0.0.0.0:0"}, "layer0: auth: no API keys are configured"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		got := stderr.String()
		if code != 1 || !strings.HasPrefix(got, tc.want) || strings.Count(got, "\n") != 1 || strings.Count(got, "layer0: ") != 1 {
			t.Errorf("layer0 %s: exit %d, stderr %q; want 1 and one line starting %q", strings.Join(tc.args, " "), code, got, tc.want)
		}
	}
}
