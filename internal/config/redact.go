package config

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Redacted is what a secret's value is replaced with by MarshalRedacted.
const Redacted = "REDACTED"

// secretKeys are the YAML keys whose values are secrets wherever they appear: an API key's
// hash (which identifies the key, and would let a guess be checked offline), and any password,
// token or credential a future setting might hold.
var secretKeys = map[string]bool{"hash": true, "password": true, "token": true, "secret": true, "api_key": true,
	"credential": true, "credentials": true}

// MarshalRedacted returns c as YAML — every setting, defaults included, as the gateway runs it —
// with every secret replaced: the values of secret keys (keys[].hash, and any password, token or
// credential) by Redacted, and the userinfo of every URL (an engine's URL, Redis URLs with a
// password) as RedactUserinfo does. Settings that name where a secret is (api_key_env,
// store.password_env) are kept: they are names, not values.
func (c *Config) MarshalRedacted() ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(c); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	redactNode(&n)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	return b.Bytes(), nil
}

// redactNode redacts n's secrets in place.
func redactNode(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if secretKeys[strings.ToLower(k.Value)] && v.Kind == yaml.ScalarNode && v.Value != "" {
				v.Value, v.Tag, v.Style = Redacted, "!!str", 0
				continue
			}
			redactNode(v)
		}
	case yaml.ScalarNode:
		// Each of a comma-separated list of URLs (store.url's cluster seeds) on its own.
		parts := strings.Split(n.Value, ",")
		for i, p := range parts {
			parts[i] = RedactUserinfo(p)
		}
		n.Value = strings.Join(parts, ",")
	default:
		for _, c := range n.Content {
			redactNode(c)
		}
	}
}

// unescapedAt reports whether the URL s holds an '@' past its authority while its authority has
// userinfo: a password with an unescaped '@' followed by '/', '?' or '#'. A URL parser reads the
// password's tail as host and path, so a message about those (a Redis database number, a path)
// would quote it; such a URL is refused with the whole userinfo redacted.
func unescapedAt(s string) bool {
	i := strings.Index(s, "://")
	if i < 0 {
		return false
	}
	rest := s[i+len("://"):]
	end := strings.IndexAny(rest, "/?#")
	return end >= 0 && strings.Contains(rest[:end], "@") && strings.Contains(rest[end:], "@")
}

// unescapedAtMsg says what is wrong with a URL for which unescapedAt holds.
const unescapedAtMsg = "the password must be percent-encoded ('@' as %40, '/' as %2F, '?' as %3F, '#' as %23)"

// RedactUserinfo returns s with the userinfo of every URL in it (the "user:password@" after a
// scheme's "://") replaced by "xxxxx@", so that a message quoting an engine's URL never shows its
// credentials. It works on text, not on parsed URLs, so it also covers URLs too malformed to
// parse and URLs inside longer messages.
func RedactUserinfo(s string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		start := i + len("://")
		// userinfo is what comes before the last '@' up to the end of the URL (a quote, a space
		// or the end of s). The '@' is looked for past the authority too: a password with a '/',
		// '?' or '#' in it breaks a URL's syntax but is still a password.
		end := start + strings.IndexFunc(rest[start:], func(r rune) bool {
			return r == '"' || r == '\'' || r == '`' || r == '\\' || r == '<' || r == '>' || unicode.IsSpace(r)
		})
		if end < start {
			end = len(rest)
		}
		at := strings.LastIndexByte(rest[start:end], '@')
		if at >= 0 {
			// A password may hold a space or a quote too: with userinfo present, it runs to the
			// last '@' before the next URL.
			next := len(rest)
			if j := strings.Index(rest[end:], "://"); j >= 0 {
				next = end + j
			}
			at = strings.LastIndexByte(rest[start:next], '@')
		}
		if at < 0 {
			b.WriteString(rest[:end])
			rest = rest[end:]
			continue
		}
		b.WriteString(rest[:start])
		b.WriteString("xxxxx")
		rest = rest[start+at:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(rest)
	return b.String()
}
