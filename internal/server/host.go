package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// Hosts is the set of host names a loopback or admin listener answers for, beside localhost
// and IP addresses. A browser page on any site whose name an attacker points at 127.0.0.1 (DNS
// rebinding) reaches a loopback listener as a same-origin request carrying that name in Host:
// such a request is refused. An IP address in Host cannot be rebound (the page's origin is the
// address itself), so addresses are always served, as the orchestrators' probes and scrapers
// that address a pod by IP need. A nil Hosts allows localhost and addresses only.
type Hosts map[string]bool

// NewHosts returns the host set of names (server.allowed_hosts), compared without case and a
// trailing dot.
func NewHosts(names []string) Hosts {
	h := make(Hosts, len(names))
	for _, n := range names {
		h[canonicalHost(n)] = true
	}
	return h
}

func canonicalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// allowed reports whether the request's Host may be served: always on a listener that is neither
// loopback nor admin (where keys are required, and a rebinding page has none), else when it
// names localhost, an IP address or one of h.
func (h Hosts) allowed(r *http.Request, admin bool) bool {
	if !admin && !onLoopback(r) {
		return true
	}
	host := r.Host
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends one
	}
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if net.ParseIP(host) != nil {
		return true
	}
	host = canonicalHost(host)
	return host == "localhost" || h[host]
}

// onLoopback reports whether the request came in on a loopback address of this host.
func onLoopback(r *http.Request) bool {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// hostRefused is the error of a request whose Host a loopback or admin listener does not serve.
func hostRefused(host string) *apierr.Error {
	return &apierr.Error{Kind: apierr.Permission, Code: "HOST_NOT_ALLOWED", Message: fmt.Sprintf("the Host header names %q, "+
		"which this listener does not serve: use localhost, an IP address, or a name listed in server.allowed_hosts", host)}
}

// bodyTypeOK reports whether a POST body's Content-Type is one an API endpoint reads: JSON
// (application/json or a +json type) or the binary protocol's. A browser's cross-site "simple
// request" can carry only text/plain, application/x-www-form-urlencoded or multipart/form-data
// (or no type, from a Blob) without asking the server first (a CORS preflight), so refusing
// everything else keeps a page on another site from running requests on a keyless loopback
// listener.
func bodyTypeOK(ct string) bool {
	if binary.IsMediaType(ct) {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// bodyTypeRefused is the error of a POST body of a type bodyTypeOK refuses.
func bodyTypeRefused(ct string) *apierr.Error {
	if ct == "" {
		ct = "none"
	}
	return &apierr.Error{Kind: apierr.UnsupportedMediaType, Code: "UNSUPPORTED_MEDIA_TYPE", Message: fmt.Sprintf("the request "+
		"body must be JSON, sent with Content-Type: application/json (or the binary protocol's "+
		"application/x-anthropic-binary); got Content-Type %q", ct)}
}
