package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// ALPNAnthropic is the ALPN protocol id layer0 offers first: a client that offers it first gets it and
// speaks HTTP/2 on it, exactly as with "h2".
const ALPNAnthropic = "anthropic-v3"

// EnableTLS makes srv serve TLS with the certificate and key files, offering ALPN anthropic-v3,
// h2 and http/1.1 (in that order of server preference). The files are re-read when they change
// (checked at most once a second, at handshakes), so a renewed certificate is served without a
// restart; a broken renewal is logged and the previous certificate kept.
func EnableTLS(srv *Front, certFile, keyFile string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cr := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger, every: time.Second}
	if err := cr.load(); err != nil {
		return err
	}
	srv.TLSConfig = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cr.get,
	}
	h2 := &http2.Server{
		MaxConcurrentStreams:         1000,
		MaxUploadBufferPerStream:     1 << 21, // SETTINGS_INITIAL_WINDOW_SIZE above 1 MiB (§4)
		MaxUploadBufferPerConnection: 1 << 24,
		IdleTimeout:                  srv.IdleTimeout,
	}
	// ConfigureServer registers h2 and sets NextProtos to h2, http/1.1; anthropic-v3 goes first
	// and is served by the same HTTP/2 server.
	if err := http2.ConfigureServer(srv.Server, h2); err != nil {
		return fmt.Errorf("server: tls: %w", err)
	}
	// The same handler as h2's, so both get the server's base context (the drain's cancellation).
	srv.TLSConfig.NextProtos = append([]string{ALPNAnthropic}, srv.TLSConfig.NextProtos...)
	srv.TLSNextProto[ALPNAnthropic] = srv.TLSNextProto["h2"]
	srv.Protocols = nil // the TLS listener's protocols come from ALPN alone
	return nil
}

// certReloader serves the current certificate and re-reads the files when their modification
// time changes.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	every             time.Duration

	mu       sync.Mutex
	cur      *tls.Certificate
	modCert  time.Time
	modKey   time.Time
	lastStat time.Time
}

func (c *certReloader) load() error {
	ci, err := os.Stat(c.certFile)
	if err != nil {
		return fmt.Errorf("server: tls certificate: %w", err)
	}
	ki, err := os.Stat(c.keyFile)
	if err != nil {
		return fmt.Errorf("server: tls key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("server: tls: %w", err)
	}
	c.cur, c.modCert, c.modKey = &cert, ci.ModTime(), ki.ModTime()
	return nil
}

func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.lastStat) >= c.every {
		c.lastStat = now
		ci, err1 := os.Stat(c.certFile)
		ki, err2 := os.Stat(c.keyFile)
		if err1 == nil && err2 == nil && (!ci.ModTime().Equal(c.modCert) || !ki.ModTime().Equal(c.modKey)) {
			if err := c.load(); err != nil {
				c.logger.Error("tls: certificate reload failed; keeping the previous certificate", "err", err)
				// Do not retry the same broken files at every handshake.
				c.modCert, c.modKey = ci.ModTime(), ki.ModTime()
			} else {
				c.logger.Info("tls: certificate reloaded", "cert", c.certFile)
			}
		}
	}
	return c.cur, nil
}
