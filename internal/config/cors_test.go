package config

import (
	"strings"
	"testing"
	"time"
)

const corsKeys = `
keys: [{name: a, hash: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}]
`

func TestCORSDefaults(t *testing.T) {
	c, err := Parse([]byte("models: {sim: {engines: [sim]}}\nengines: {sim: {kind: sim}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.CORS.AllowedOrigins) != 0 || c.CORS.MaxAge != DefaultCORSMaxAge || c.Playground {
		t.Errorf("defaults: cors %+v, playground %v; want no origin, max_age %s, no playground", c.CORS, c.Playground, DefaultCORSMaxAge)
	}
	if !Default().Playground {
		t.Error("the embedded default has no playground")
	}
	c, err = Parse([]byte(corsKeys + `
playground: true
cors:
  allowed_origins: ["https://app.example", "http://localhost:3000"]
  allow_credentials: true
  max_age: 2h
  allowed_headers: [X-Trace]
  exposed_headers: [x-custom]
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Playground || c.CORS.MaxAge != 2*time.Hour || !c.CORS.AllowCredentials || c.CORS.AnyOrigin() {
		t.Errorf("parsed: %+v", c.CORS)
	}
}

func TestCORSValidation(t *testing.T) {
	for _, c := range []struct {
		doc, want string
	}{
		{corsKeys + `cors: {allowed_origins: ["*"]}`, `cors.allowed_origins: "*" lets any web page use a key`},
		{`cors: {allowed_origins: ["*"], allow_credentials: true}`, "cors.allow_credentials: not with"},
		{`cors: {allowed_origins: ["https://app.example/path"]}`, "no path, query or fragment"},
		{`cors: {allowed_origins: ["https://App.example"]}`, "lower case"},
		{`cors: {allowed_origins: ["ftp://app.example"]}`, "http or https"},
		{`cors: {allowed_origins: ["app.example"]}`, "http or https"},
		{`cors: {allowed_origins: ["https://"]}`, "scheme://host"},
		{`cors: {allowed_origins: ["https://a.example"], max_age: 48h}`, "cors.max_age: 48h0m0s: want 0s to 24h0m0s"},
		{`cors: {allowed_origins: ["https://a.example"], max_age: -1s}`, "cors.max_age"},
		{`cors: {allowed_headers: ["x bad"]}`, `cors.allowed_headers: [0] "x bad": not a header name`},
		{`cors: {exposed_headers: [""]}`, `cors.exposed_headers: [0] "": not a header name`},
		{`cors: {allowed_origin: ["https://a.example"]}`, "field allowed_origin not found"},
		{`playground: yes please`, "playground"},
	} {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.doc, err, c.want)
		}
	}
	// "*" with keys when asked for explicitly, and without keys.
	for _, doc := range []string{corsKeys + `cors: {allowed_origins: ["*"], any_origin_with_keys: true}`, `cors: {allowed_origins: ["*"]}`} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
		} else if !c.CORS.AnyOrigin() {
			t.Errorf("%s: not any origin", doc)
		}
	}
}
