// Package h2xconnect turns on HTTP/2 extended CONNECT (RFC 8441) in Go's HTTP/2 servers, so that
// they announce SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 as layer0's protocol promises.
//
// Both HTTP/2 servers in a layer0 binary — the one bundled in net/http (cleartext h2c) and the
// one of golang.org/x/net/http2 (TLS, ALPN anthropic-v3 and h2) — leave extended CONNECT off
// unless the GODEBUG environment variable holds "http2xconnect=1" when their package is
// initialized; neither has an API for it, and the setting is not one that a //go:debug directive
// can carry. This package adds the setting to GODEBUG in its own init. The Go specification
// initializes packages in the order of their import paths among those whose imports are ready,
// so this package, which imports only os and strings and whose path sorts before both
// "golang.org/x/net/http2" and "net/http", is always initialized before them in any binary that
// links it. Importing it (blank) is all a binary needs.
//
// An operator who sets GODEBUG=http2xconnect=0 keeps extended CONNECT off: the explicit choice
// wins.
package h2xconnect

import (
	"os"
	"strings"
)

// Setting is the GODEBUG entry this package adds.
const Setting = "http2xconnect=1"

func init() {
	os.Setenv("GODEBUG", With(os.Getenv("GODEBUG"))) //nolint:errcheck // cannot fail for these names
}

// With returns the GODEBUG value godebug with extended CONNECT turned on, unless godebug already
// sets http2xconnect either way.
func With(godebug string) string {
	for _, kv := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(kv), "http2xconnect=") {
			return godebug
		}
	}
	if godebug == "" {
		return Setting
	}
	return godebug + "," + Setting
}
