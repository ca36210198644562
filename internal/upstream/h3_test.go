package upstream

import (
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/h3"
)

// HTTP3FromEnv reads LAYER0_HTTP3; an https:// engine gets the HTTP/3 transport, an http:// one
// never does, and a value that is not a mode is an error naming the variable.
func TestHTTP3FromEnv(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == h3.EnvVar {
				return v
			}
			return ""
		}
	}
	c, err := New("e", config.Engine{URL: "https://127.0.0.1:1"}, Options{Getenv: env("auto"), HTTP3FromEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.h3 == nil || c.hc.Transport != c.h3 {
		t.Error("LAYER0_HTTP3=auto: the https engine's client does not use the HTTP/3 transport")
	}
	if c, err = New("e", config.Engine{URL: "http://127.0.0.1:1"}, Options{Getenv: env("on"), HTTP3FromEnv: true}); err != nil || c.h3 != nil {
		t.Errorf("http:// engine with LAYER0_HTTP3=on: h3 %v, err %v; want no HTTP/3", c.h3 != nil, err)
	}
	if c, err = New("e", config.Engine{URL: "https://127.0.0.1:1"}, Options{Getenv: env("on")}); err != nil || c.h3 != nil {
		t.Errorf("without HTTP3FromEnv: h3 %v, err %v; want the environment ignored", c.h3 != nil, err)
	}
	if _, err := New("e", config.Engine{URL: "https://127.0.0.1:1"}, Options{Getenv: env("maybe"), HTTP3FromEnv: true}); err == nil ||
		!strings.Contains(err.Error(), h3.EnvVar) {
		t.Errorf("LAYER0_HTTP3=maybe: got %v, want an error naming %s", err, h3.EnvVar)
	}
}
