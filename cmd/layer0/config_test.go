package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, text string
		want       string // "" means accepted; else a substring of the error
	}{
		{"ok", "engines: {s: {kind: sim}}\nmodels: {m: {engines: [s]}}\n", ""},
		{"problems", "bogus: 1\nengines: {a: {kind: openai}}\nmodels: {m: {engines: [a]}}\n", "engines.a.url: required"},
		{"no keys off loopback", "server: {addr: '0.0.0.0:8080'}\n", "keys"},
		{"http3 without tls", "server: {http3: true}\n", "server.http3: needs server.tls"},
		{"missing tls files", "server: {tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}}\n", "server.tls"},
		// Every refusal the build of the gateway can make is reported by the check.
		{"unset redis password", "store: {kind: redis, url: 'redis://127.0.0.1:9', password_env: L0_TEST_SURELY_UNSET}\n", "store.password_env"},
		{"duplicate key hash", "keys: [{name: a, hash: " + strings.Repeat("ab", 32) + "}, {name: b, hash: " + strings.Repeat("ab", 32) + "}]\n", "hash"},
		{"unset credential", "engines: {v: {kind: openai, url: 'http://127.0.0.1:9', api_key_env: L0_TEST_SURELY_UNSET}}\nmodels: {m: {engines: [v]}}\n", "L0_TEST_SURELY_UNSET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runConfig([]string{"check", write(tt.name+".yaml", tt.text)}, &out)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want ok", err)
			case tt.want == "" && !strings.Contains(out.String(), ": ok"):
				t.Errorf("output %q, want ok", out.String())
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}
