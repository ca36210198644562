package config

import (
	"strings"
	"testing"
)

// The operator's settings: their defaults, and a bad value refused with its path.
func TestOperatorSettings(t *testing.T) {
	c, err := Parse([]byte(`
server: {admin_addr: ":9090"}
models:
  a: {engines: [e]}
  b: {engines: [e], required: false}
engines:
  e: {kind: sim}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.AdminAddr != "127.0.0.1:9090" {
		t.Errorf("admin_addr :9090 became %q, want loopback", c.Server.AdminAddr)
	}
	if !*c.Models["a"].Required || *c.Models["b"].Required {
		t.Errorf("required: a %v b %v, want true by default and false as set", *c.Models["a"].Required, *c.Models["b"].Required)
	}
	if al := c.Log.AccessLog; al.Format != AccessJSON || al.Path != "" || al.Scrapes {
		t.Errorf("access_log defaults: %+v, want json on stderr without scrapes", al)
	}
	c, err = Parse([]byte("server: {admin_addr: \"0.0.0.0:9090\"}\nlog: {access_log: {path: /var/log/l0/access.log, format: text, scrapes: true}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.AdminAddr != "0.0.0.0:9090" || c.Log.AccessLog != (AccessLog{Path: "/var/log/l0/access.log", Format: AccessText, Scrapes: true}) {
		t.Errorf("set values not kept: %q %+v", c.Server.AdminAddr, c.Log.AccessLog)
	}
	for text, want := range map[string]string{
		"log: {access_log: {format: xml}}":         `log.access_log.format: unknown format "xml"`,
		"log: {access_log: {path: /var/log/}}":     `log.access_log.path: "/var/log/" names a directory`,
		"log: {access_log: {rotate: daily}}":       "rotate",
		"models: {a: {engines: [e], required: 1}}": "required",
	} {
		_, err := Parse([]byte(text + "\nengines: {e: {kind: sim}}\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error with %q", text, err, want)
		}
	}
}

// MarshalRedacted keeps every setting but the secrets.
func TestMarshalRedacted(t *testing.T) {
	t.Setenv("REDIS_PW", "pw")
	c, err := Parse([]byte(`
keys: [{name: k, hash: ` + strings.Repeat("ab", 32) + `}]
store: {kind: redis, url: "redis://u:pw-1@h:1,rediss://:pw-2@h:2", password_env: REDIS_PW}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.MarshalRedacted()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, secret := range []string{"abab", "pw-1", "pw-2"} {
		if strings.Contains(s, secret) {
			t.Errorf("%q shown:\n%s", secret, s)
		}
	}
	for _, kept := range []string{"name: k", "hash: REDACTED", "redis://xxxxx@h:1,rediss://xxxxx@h:2", "password_env: REDIS_PW", "read_body_timeout: 30s"} {
		if !strings.Contains(s, kept) {
			t.Errorf("%q missing:\n%s", kept, s)
		}
	}
}
