package config

import (
	"fmt"
	"strings"
	"time"
)

// The servers of cleartext HTTP/1.1 (Server.HTTP1).
const (
	HTTP1Lean    = "lean"
	HTTP1NetHTTP = "net/http"
)

// Server configures the listener.
type Server struct {
	// Addr is the HOST:PORT to listen on. Default "127.0.0.1:8080"; the --addr flag overrides it.
	Addr string `yaml:"addr"`
	// MaxBodyBytes is the largest request body accepted, in bytes; larger gets 413.
	// Default 33554432 (32 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes keep-alive connections idle this long. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ShutdownTimeout is how long in-flight requests may run after a stop signal. Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// ReadBodyTimeout bounds reading a whole request body, from the first body read; a body
	// still arriving then gets 408 and the connection is closed. Default 30s.
	ReadBodyTimeout time.Duration `yaml:"read_body_timeout"`
	// MinBodyRate is the slowest a request body may arrive, in bytes per second, after a grace
	// of 5 seconds: a body that falls behind it gets 408 before ReadBodyTimeout. -1 disables the
	// floor (ReadBodyTimeout still applies). Default 1024.
	MinBodyRate int64 `yaml:"min_body_rate"`
	// WriteTimeout bounds each write to a client: a whole answer that is not streamed, or each
	// flush of a stream (a client that stops reading is disconnected after it; the time between
	// two events of a stream is not bounded by it). Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxConnections caps the open connections of the listener; one more is refused (a 503 on
	// cleartext, closed on TLS), counted in layer0_connections_refused_total and logged.
	// Default 10000, lowered to fit the process's file descriptor limit.
	MaxConnections int `yaml:"max_connections"`
	// NewConnectionTimeout closes a connection that has not sent its first request this long
	// after it was accepted (an HTTP/1.1 connection without a request head, an h2c one that sent
	// only its preface and SETTINGS, a TLS one that did not finish its handshake and request).
	// Default 5s.
	NewConnectionTimeout time.Duration `yaml:"new_connection_timeout"`
	// MaxNewConnections caps the connections that have not sent their first request yet, a
	// share of MaxConnections they cannot exceed, so that idle strangers never take the slots of
	// clients that send requests (health checks included); one more is refused as at
	// MaxConnections. Default half of MaxConnections.
	MaxNewConnections int `yaml:"max_new_connections"`
	// MaxNewConnectionsPerSource caps those connections per client IP address; -1 turns the cap
	// off (for a trusted proxy in front, whose address every connection has). Default 256.
	MaxNewConnectionsPerSource int `yaml:"max_new_connections_per_source"`
	// MaxQUICHandshakes caps the HTTP/3 (QUIC) handshakes in progress at once, a bound of
	// their own that never takes TCP's MaxConnections; beyond half of it, new QUIC clients must
	// prove their address first (a Retry). Default 256.
	MaxQUICHandshakes int `yaml:"max_quic_handshakes"`
	// AllowedHosts are host names (without port) the Host header may carry beside the
	// listener's own, on a loopback listener and on the admin listener, which answer any other
	// Host with 403 (DNS rebinding: a web page whose name resolves to 127.0.0.1). Their own are
	// localhost and any IP address (an address cannot be rebound). A reload applies it. Default
	// none.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// MaxBodyBytesInFlight is the budget of memory held by request bodies being read or served
	// at once, in bytes; a body that would exceed it gets 503 with retry-after. Default
	// 536870912 (512 MiB).
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
	// AdminAddr, when set, is a second HOST:PORT serving the operator's endpoints (/metrics,
	// /metrics/engines/NAME, /healthz, /readyz, /config, /debug/pprof/, /debug/requests); /metrics
	// is then not served on Addr, so key names in its labels are not public. It has no auth: a
	// ":PORT" without a host listens on 127.0.0.1. Default "" (no admin listener; metrics on Addr).
	AdminAddr string `yaml:"admin_addr"`
	// TLS, when its files are set, serves HTTPS (ALPN anthropic-v3, h2, http/1.1) instead of
	// cleartext HTTP/1.1 + h2c. Default: off.
	TLS TLS `yaml:"tls"`
	// HTTP1 chooses the server of cleartext HTTP/1.1 connections: "net/http" (Go's) or "lean"
	// (layer0's own: less work per request, stricter parsing). TLS, HTTP/2 and h2c are served
	// by Go's either way. Default "lean".
	HTTP1 string `yaml:"http1"`
	// HTTP3 also serves HTTP/3 (QUIC) over UDP on the same port, advertised to TLS clients with
	// Alt-Svc. Only with TLS. Default false.
	HTTP3 bool `yaml:"http3"`
}

// TLS names the certificate and key files (PEM). Both or neither. They are re-read when they
// change, without a restart.
type TLS struct {
	// CertFile is the certificate chain, PEM.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the private key, PEM.
	KeyFile string `yaml:"key_file"`
}

// Defaults of the listener's protections (docs/operations.md lists them all).
const (
	DefaultReadBodyTimeout      = 30 * time.Second
	DefaultMinBodyRate          = 1024
	DefaultWriteTimeout         = 30 * time.Second
	DefaultMaxConnections       = 10000
	DefaultMaxBodyBytesInFlight = 512 << 20
	// DefaultNewConnectionTimeout is server.new_connection_timeout's default.
	DefaultNewConnectionTimeout = 5 * time.Second
	// DefaultMaxNewConnectionsPerSource is server.max_new_connections_per_source's default.
	DefaultMaxNewConnectionsPerSource = 256
	// DefaultMaxQUICHandshakes is server.max_quic_handshakes's default.
	DefaultMaxQUICHandshakes = 256
)

// validate checks the listener's settings: TLS and HTTP/3, the body, time and connection
// bounds, the allowed hosts and the HTTP/1.1 server.
func (s *Server) validate(errs *Errors) {
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		errs.add("server.tls", "cert_file and key_file must be given together")
	}
	if s.HTTP3 && s.TLS.CertFile == "" {
		errs.add("server.http3", "needs server.tls (HTTP/3 is always encrypted)")
	}
	if s.MaxBodyBytes < 0 {
		errs.add("server.max_body_bytes", "must be positive, got %d", s.MaxBodyBytes)
	}
	notNegative(errs, "server.read_body_timeout", s.ReadBodyTimeout)
	notNegative(errs, "server.write_timeout", s.WriteTimeout)
	if s.MinBodyRate < -1 {
		errs.add("server.min_body_rate", "must be positive, or -1 to disable the floor")
	}
	if s.MaxConnections < 0 {
		errs.add("server.max_connections", "must be positive")
	}
	notNegative(errs, "server.new_connection_timeout", s.NewConnectionTimeout)
	if n := s.MaxNewConnections; n < 0 || n > s.MaxConnections {
		errs.add("server.max_new_connections", "must be between 1 and server.max_connections (%d), got %d", s.MaxConnections, n)
	}
	if s.MaxNewConnectionsPerSource < -1 {
		errs.add("server.max_new_connections_per_source", "must be positive, or -1 to turn the cap off")
	}
	if s.MaxQUICHandshakes < 0 {
		errs.add("server.max_quic_handshakes", "must be positive")
	}
	for i, h := range s.AllowedHosts {
		if h == "" || strings.ContainsAny(h, " /:@\t") && !strings.HasPrefix(h, "[") {
			errs.add(fmt.Sprintf("server.allowed_hosts[%d]", i), "must be a host name or IP address without a port, got %q", h)
		}
	}
	if h := s.HTTP1; h != "" && h != HTTP1Lean && h != HTTP1NetHTTP {
		errs.add("server.http1", "must be %q or %q, got %q", HTTP1Lean, HTTP1NetHTTP, h)
	}
	if s.MaxBodyBytesInFlight < 0 {
		errs.add("server.max_body_bytes_in_flight", "must be positive")
	} else if s.MaxBodyBytesInFlight < s.MaxBodyBytes {
		errs.add("server.max_body_bytes_in_flight", "must be at least server.max_body_bytes (%d), got %d",
			s.MaxBodyBytes, s.MaxBodyBytesInFlight)
	}
}

// setDefaults fills the listener's unset fields with their defaults. An admin address without a
// host listens on loopback only: the admin listener has no auth.
func (s *Server) setDefaults() {
	setDefault(&s.Addr, "127.0.0.1:8080")
	setDefault(&s.MaxBodyBytes, 32<<20)
	setDefault(&s.ReadHeaderTimeout, 10*time.Second)
	setDefault(&s.IdleTimeout, 120*time.Second)
	setDefault(&s.HTTP1, HTTP1Lean)
	setDefault(&s.ShutdownTimeout, 30*time.Second)
	setDefault(&s.ReadBodyTimeout, DefaultReadBodyTimeout)
	setDefault(&s.MinBodyRate, DefaultMinBodyRate)
	setDefault(&s.WriteTimeout, DefaultWriteTimeout)
	setDefault(&s.MaxConnections, DefaultMaxConnections)
	setDefault(&s.MaxBodyBytesInFlight, DefaultMaxBodyBytesInFlight)
	setDefault(&s.NewConnectionTimeout, DefaultNewConnectionTimeout)
	setDefault(&s.MaxNewConnections, max(s.MaxConnections/2, 1))
	setDefault(&s.MaxNewConnectionsPerSource, DefaultMaxNewConnectionsPerSource)
	setDefault(&s.MaxQUICHandshakes, DefaultMaxQUICHandshakes)
	if strings.HasPrefix(s.AdminAddr, ":") {
		s.AdminAddr = "127.0.0.1" + s.AdminAddr
	}
}
