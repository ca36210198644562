package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/store"
	"github.com/redis/go-redis/v9"
)

// runServe implements `layer0 serve`.
func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "usage: layer0 serve [--addr HOST:PORT] [--config FILE]\n\nServes the APIs; SIGHUP (or a change of FILE) reloads the configuration.\n\nFlags:\n", stderr)
	addr := fs.String("addr", "", "listen address HOST:PORT (default 127.0.0.1:8080, or server.addr from the config)")
	path := fs.String("config", "", "configuration file (default: the embedded sim engine)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg := config.Served()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			return err
		}
	}
	if *addr != "" {
		cfg.Server.Addr = *addr
	}
	var err error
	level := new(slog.LevelVar)
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	// Libraries that write through the standard log package (QUIC's warning about UDP buffer
	// sizes) write JSON records too, at WARN.
	prevOut, prevFlags := stdlog.Writer(), stdlog.Flags()
	stdlog.SetFlags(0)
	stdlog.SetOutput(slog.NewLogLogger(logger.Handler(), slog.LevelWarn).Writer())
	defer func() {
		stdlog.SetOutput(prevOut)
		stdlog.SetFlags(prevFlags)
	}()
	// The Redis client has its own logger, which would write plain lines to stderr: its lines are
	// records too. It is the process's (go-redis keeps one), so it is set here, not by the library.
	redis.SetLogger(store.NewLogger(logger))
	opts := []layer0.Option{layer0.WithLogger(logger)}
	var accessFile *accesslog.File
	if *cfg.Log.Access {
		var w io.Writer = stderr
		if p := cfg.Log.AccessLog.Path; p != "" {
			if accessFile, err = accesslog.OpenFile(p); err != nil {
				return err
			}
			defer accessFile.Close()
			w = accessFile
		}
		opts = append(opts, layer0.WithAccessLog(w))
	}
	g, err := layer0.New(cfg, opts...)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer g.Close() // before the access log file closes: it writes what is queued
	if accessFile != nil {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
		go reopenOnSignal(ctx, usr1, accessFile, logger)
	}
	if *path != "" {
		r := newReloader(*path, g, logger, level)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		go r.run(ctx, hup, tick.C)
	}
	// A signal is said as it arrives, and the stop once done: an operator pressing ^C sees the
	// gateway drain, not a silent exit.
	said := make(chan struct{})
	unsaid := context.AfterFunc(ctx, func() {
		defer close(said)
		fmt.Fprintf(stdout, "layer0 stopping (%v): requests in flight have up to %s to finish\n",
			context.Cause(ctx), cfg.Server.ShutdownTimeout)
		logger.Info("stopping", "cause", context.Cause(ctx).Error(), "shutdown_timeout", cfg.Server.ShutdownTimeout.String())
	})
	err = g.ListenAndServe(ctx, announce(stdout, logger, g, *path == ""))
	if !unsaid() {
		<-said // its own goroutine: "stopping" is written before "stopped"
		fmt.Fprintln(stdout, "layer0 stopped")
	}
	return err
}

// announce returns the ready function of ListenAndServe that says where the gateway serves,
// what it serves without a config file, and that it serves without auth.
func announce(stdout io.Writer, logger *slog.Logger, g *layer0.Gateway, embedded bool) func(layer0.Serving) {
	return func(s layer0.Serving) {
		if s.Admin != nil {
			fmt.Fprintf(stdout, "layer0 admin endpoints (/metrics, /healthz, /readyz, /config, /debug/pprof/, /debug/requests) on http://%s\n", s.Admin)
		}
		if s.HTTP3 != nil {
			fmt.Fprintf(stdout, "layer0 HTTP/3 on udp %s (Alt-Svc: %s)\n", s.HTTP3, s.AltSvc)
		}
		fmt.Fprintf(stdout, "layer0 listening on %s://%s (models: %s)\n", s.Scheme, s.Addr, modelList(g.Config()))
		if embedded {
			fmt.Fprintln(stdout, "no --config given: serving the embedded sim engine (a simulator, not a real model)")
		}
		if g.Authless() {
			fmt.Fprintln(stdout, "no API keys configured: serving WITHOUT AUTH, which layer0 allows on loopback only (layer0 keys new makes a key)")
			logger.Warn("no API keys configured: serving without auth on a loopback address", "addr", s.Addr.String())
		}
	}
}

// reopenOnSignal reopens the access log file at each signal on sig (SIGUSR1, sent by logrotate
// after it renamed the file), until ctx ends.
func reopenOnSignal(ctx context.Context, sig <-chan os.Signal, f *accesslog.File, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			if err := f.Reopen(); err != nil {
				logger.Error("reopening the access log failed; still writing the previous file", "path", f.Path(), "err", err)
				continue
			}
			logger.Info("access log reopened", "path", f.Path())
		}
	}
}

func modelList(cfg *config.Config) string {
	ids := make([]string, 0, len(cfg.Models)+len(cfg.Aliases)+len(cfg.Splits))
	for id := range cfg.Models {
		ids = append(ids, id)
	}
	for id := range cfg.Splits {
		ids = append(ids, id)
	}
	for id := range cfg.Aliases {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}
