package config

import (
	"net/url"
	"strings"
	"time"
)

// CORS says which web pages of other origins may call the APIs from a browser
// (docs/operations.md, "Browsers: CORS"). Default: no origin; a page served by layer0 itself
// (the playground) needs none.
type CORS struct {
	// AllowedOrigins are the origins ("https://app.example", "http://localhost:3000") whose
	// pages may call the APIs, or "*" for any. "*" with keys configured needs AnyOriginWithKeys.
	// Default none.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// AnyOriginWithKeys allows "*" although keys are configured: any page may then use a key
	// its user gives it. Default false.
	AnyOriginWithKeys bool `yaml:"any_origin_with_keys"`
	// AllowCredentials sends Access-Control-Allow-Credentials: true, so pages may send cookies
	// and HTTP authentication; not with "*". Default false.
	AllowCredentials bool `yaml:"allow_credentials"`
	// MaxAge is how long a browser may keep a preflight's answer (browsers cap it: Chromium at
	// 2h, Firefox at 24h). Default 10m; at most 24h.
	MaxAge time.Duration `yaml:"max_age"`
	// AllowedHeaders are request headers allowed beyond the built-in ones (the APIs', the
	// binary protocol's and layer0's own). Default none.
	AllowedHeaders []string `yaml:"allowed_headers"`
	// ExposedHeaders are response headers shown to pages beyond the built-in ones (request id,
	// timings, rate limits, cache, the binary protocol's). Default none.
	ExposedHeaders []string `yaml:"exposed_headers"`
}

// CORS defaults and bounds.
const (
	DefaultCORSMaxAge = 10 * time.Minute
	MaxCORSMaxAge     = 24 * time.Hour
)

func (c *CORS) setDefaults() {
	setDefault(&c.MaxAge, DefaultCORSMaxAge)
}

// AnyOrigin reports whether every origin is allowed ("*").
func (c *CORS) AnyOrigin() bool {
	for _, o := range c.AllowedOrigins {
		if o == "*" {
			return true
		}
	}
	return false
}

func (c *Config) validateCORS(errs *Errors) {
	cc := &c.CORS
	for i, o := range cc.AllowedOrigins {
		if o == "*" {
			continue
		}
		if msg := checkOrigin(o); msg != "" {
			errs.add("cors.allowed_origins", "[%d] %q: %s", i, o, msg)
		}
	}
	if cc.AnyOrigin() {
		if len(c.Keys) > 0 && !cc.AnyOriginWithKeys {
			errs.add("cors.allowed_origins", `"*" lets any web page use a key its user gives it; with keys configured, list the origins, or set cors.any_origin_with_keys: true`)
		}
		if cc.AllowCredentials {
			errs.add("cors.allow_credentials", `not with "*" (browsers refuse credentials to any origin): list the origins`)
		}
	}
	if cc.MaxAge < 0 || cc.MaxAge > MaxCORSMaxAge {
		errs.add("cors.max_age", "%s: want 0s to %s", cc.MaxAge, MaxCORSMaxAge)
	}
	for field, hs := range map[string][]string{"allowed_headers": cc.AllowedHeaders, "exposed_headers": cc.ExposedHeaders} {
		for i, h := range hs {
			if !headerToken(h) {
				errs.add("cors."+field, "[%d] %q: not a header name", i, h)
			}
		}
	}
}

// checkOrigin returns what is wrong with o as a browser origin (scheme://host[:port], nothing
// more), or "".
func checkOrigin(o string) string {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return "not an origin: want scheme://host[:port]"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http or https origin (scheme://host[:port])"
	case u.Host == "" || u.User != nil:
		return "want scheme://host[:port]"
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#"):
		return "an origin has no path, query or fragment (browsers send scheme://host[:port])"
	case o != strings.ToLower(o):
		return "browsers send origins in lower case"
	}
	return ""
}

// headerToken reports whether h is a valid HTTP header name.
func headerToken(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
