package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
)

// fingerprint identifies a version of the config file by its content's SHA-256: a touch that
// changes nothing is not a reload, and an edit is seen whatever the file system's timestamp
// resolution. Reading a config file once a second costs nothing.
type fingerprint [sha256.Size]byte

func fingerprintOf(path string) (fingerprint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fingerprint{}, err
	}
	return sha256.Sum256(b), nil
}

// settleTime is how long the config file must have been left alone — its size, modification
// time and content unchanged — before it is read as complete; settleTries bounds the re-reads
// while it keeps changing. A second covers a writer that pauses mid-file (an editor's save, a
// script writing in steps; 0.6s pauses were seen to get a first half loaded with 250ms).
const (
	settleTime  = time.Second
	settleTries = 20
)

// reloader re-reads the config file on SIGHUP and whenever its content changes (polled once a
// second: no dependency, and it works on every file system, including the symlink swaps of a
// Kubernetes ConfigMap). A file that fails to load is rejected with every problem logged, and the
// running configuration keeps serving. A reload is never less strict than a start: the file is
// read until it has settled (see stable), an empty file is an error, and a file that removes every
// key while keys are in force is refused unless it sets auth.allow_none.
type reloader struct {
	path   string
	g      *layer0.Gateway
	logger *slog.Logger
	level  *slog.LevelVar
	last   fingerprint // the version last loaded or rejected
	settle time.Duration
	sleep  func(time.Duration) // time.Sleep; replaced in tests
}

func newReloader(path string, g *layer0.Gateway, logger *slog.Logger, level *slog.LevelVar) *reloader {
	r := &reloader{path: path, g: g, logger: logger, level: level, settle: settleTime, sleep: time.Sleep}
	r.last, _ = fingerprintOf(path) // the version New was given, near enough: a change after it is seen
	return r
}

// fileVersion identifies what one read of the config file saw.
type fileVersion struct {
	size int64
	mod  time.Time
	sum  fingerprint
}

// same reports whether v and w saw the same file: size, modification time and content.
func (v fileVersion) same(w fileVersion) bool {
	return v.size == w.size && v.mod.Equal(w.mod) && v.sum == w.sum
}

// read reads the file and the version it read.
func (r *reloader) read() ([]byte, fileVersion, error) {
	f, err := os.Open(r.path)
	if err != nil {
		return nil, fileVersion{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileVersion{}, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fileVersion{}, err
	}
	return b, fileVersion{size: fi.Size(), mod: fi.ModTime(), sum: sha256.Sum256(b)}, nil
}

// stable reads the file once it has settled: when it was last modified at least r.settle ago,
// or else when two reads r.settle apart saw the same size, modification time and content. A file
// written in place (not renamed into place) is empty or partial while it is written; what stable
// returns is what its writer left.
func (r *reloader) stable() ([]byte, error) {
	b, v, err := r.read()
	for range settleTries {
		if err != nil {
			return nil, err
		}
		if time.Since(v.mod) >= r.settle {
			return b, nil
		}
		r.sleep(r.settle)
		var again []byte
		var w fileVersion
		again, w, err = r.read()
		if err == nil && w.same(v) {
			return b, nil
		}
		b, v = again, w
	}
	return nil, fmt.Errorf("config: %s: still changing after %d reads %v apart", r.path, settleTries, r.settle)
}

// run reloads on each signal from hup and each tick on which the file changed, until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("SIGHUP")
		case <-tick:
			r.poll()
		}
	}
}

// poll reloads when the file's fingerprint changed since the last attempt.
func (r *reloader) poll() {
	fp, err := fingerprintOf(r.path)
	if err != nil {
		if r.last != (fingerprint{}) {
			r.logger.Error("config file unreadable; the running configuration keeps serving", "path", r.path, "err", err)
			r.last = fingerprint{}
		}
		return
	}
	if fp == r.last {
		return
	}
	r.last = fp
	r.reload("file changed")
}

// reload loads the file and swaps the new configuration in, or logs why not. The listener's own
// settings cannot change without a restart: the address in force is kept, and a change to the
// others is reported.
func (r *reloader) reload(why string) bool {
	cfg, err := r.load()
	running := r.g.Config()
	if err == nil {
		fileAddr := cfg.Server.Addr
		cfg.Server.Addr = running.Server.Addr
		err = r.g.Reload(cfg)
		if err == nil {
			s, rs := cfg.Server, running.Server
			if fileAddr != rs.Addr || s.TLS != rs.TLS || s.HTTP3 != rs.HTTP3 || s.ReadHeaderTimeout != rs.ReadHeaderTimeout || s.IdleTimeout != rs.IdleTimeout ||
				s.MaxConnections != rs.MaxConnections || s.NewConnectionTimeout != rs.NewConnectionTimeout || s.MaxNewConnections != rs.MaxNewConnections ||
				s.MaxNewConnectionsPerSource != rs.MaxNewConnectionsPerSource || s.MaxQUICHandshakes != rs.MaxQUICHandshakes ||
				s.ShutdownTimeout != rs.ShutdownTimeout || *cfg.Log.Access != *running.Log.Access || cfg.Log.AccessLog != running.Log.AccessLog ||
				cfg.Limits.MaxHeaderBytes != running.Limits.MaxHeaderBytes {
				r.logger.Warn("config reloaded, but the listener's settings (server.addr, server.tls, server.http3, timeouts, connection caps, "+
					"log.access, log.access_log, "+
					"limits.max_header_bytes at the listener) apply only after a restart", "path", r.path)
			}
		}
	}
	if err != nil {
		var problems *config.Errors
		if errors.As(err, &problems) {
			r.logger.Error("config reload rejected; the previous configuration keeps serving",
				"path", r.path, "reason", why, "problems", problems.List)
		} else {
			r.logger.Error("config reload rejected; the previous configuration keeps serving",
				"path", r.path, "reason", why, "err", err)
		}
		return false
	}
	_ = r.level.UnmarshalText([]byte(cfg.Log.Level))
	r.logger.Info("config reloaded", "path", r.path, "reason", why)
	return true
}

// load reads the settled file and checks it as a start would, and more: it must not remove
// every key while keys are in force unless it says so (auth.allow_none). The version read is
// remembered, so polling does not retry it.
func (r *reloader) load() (*config.Config, error) {
	b, err := r.stable()
	if err != nil {
		return nil, err
	}
	r.last = sha256.Sum256(b)
	cfg, err := config.LoadBytes(r.path, b)
	if err != nil {
		return nil, err
	}
	if n := len(r.g.Config().Keys); n > 0 && len(cfg.Keys) == 0 && !cfg.Auth.AllowNone {
		return nil, fmt.Errorf("config: %s: %w", r.path, &config.Errors{List: []string{fmt.Sprintf(
			"keys: the file has no keys while %d are in force; set auth.allow_none: true to turn auth off", n)}})
	}
	return cfg, nil
}
