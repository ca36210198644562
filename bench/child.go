package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the children's profiling listener (listenChild)
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
)

// The report runs its servers as children of its own executable, each in its own process (its
// own scheduler and garbage collector, as in production). A child prints "ready ADDR…" on stdout
// once listening and exits when its stdin closes, so that it never outlives the report.
const (
	childUpstream = "child-upstream"
	childGateway  = "child-gateway"
)

// runUpstreamChild serves internal/bench's fast upstream on a free loopback port.
func runUpstreamChild(args []string) error {
	fs := flag.NewFlagSet(childUpstream, flag.ContinueOnError)
	tokens := fs.Int("tokens", 100, "tokens per response")
	itl := fs.Duration("itl", 0, "delay between tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	up, err := bench.NewUpstream(bench.UpstreamConfig{Tokens: *tokens, ITL: *itl})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = up.Serve(ln) }()
	fmt.Printf("ready %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return up.Close()
}

// runGatewayChild serves layer0 as `layer0 serve --config FILE` does, on a free loopback port,
// with net/http/pprof on a second one.
func runGatewayChild(args []string) error {
	fs := flag.NewFlagSet(childGateway, flag.ContinueOnError)
	path := fs.String("config", "", "configuration file")
	accessPath := fs.String("access-log", os.DevNull, "access log file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	f, err := os.Create(*accessPath)
	if err != nil {
		return err
	}
	defer f.Close()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := layer0.New(cfg, layer0.WithLogger(logger), layer0.WithAccessLog(f))
	if err != nil {
		return err
	}
	defer g.Close() // writes the queued access log records before f closes
	srv := server.HTTPServer(g, server.ListenOptions{
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		HTTP1:             cfg.Server.HTTP1,
	})
	ln, pl, err := listenChild()
	if err != nil {
		return err
	}
	// With server.tls, a second listener serves TLS (HTTP/2 and HTTP/1.1 by ALPN), and with
	// server.http3 HTTP/3 on its port's UDP side, set up with what `layer0 serve` uses for them
	// (EnableTLS, ListenHTTP3); the first listener stays cleartext.
	tlsCtx, stopTLS := context.WithCancel(context.Background())
	defer stopTLS()
	var tlsAddr string
	tlsDone := make(chan error, 2)
	tlsServing := 0
	if t := cfg.Server.TLS; t.CertFile != "" {
		tsrv := server.HTTPServer(g, server.ListenOptions{
			ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
			IdleTimeout:       cfg.Server.IdleTimeout,
		})
		if err := server.EnableTLS(tsrv, t.CertFile, t.KeyFile, logger); err != nil {
			return err
		}
		tln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		if cfg.Server.HTTP3 {
			h3, err := server.ListenHTTP3(tsrv, tln)
			if err != nil {
				return err
			}
			tlsServing++
			go func() { tlsDone <- h3.Serve(tlsCtx, 5*time.Second) }()
		}
		tlsServing++
		go func() { tlsDone <- server.Serve(tlsCtx, tsrv, tln, 5*time.Second, nil) }()
		tlsAddr = tln.Addr().String()
	}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("ready %s %s %s\n", ln.Addr(), pl.Addr(), tlsAddr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopTLS()
	errs := []error{srv.Shutdown(ctx)}
	for range tlsServing {
		errs = append(errs, <-tlsDone)
	}
	return errors.Join(errs...)
}

// listenChild opens a child's two loopback listeners: ln for its clients, and pl, already
// serving net/http/pprof's profiles, so that the report can set the children's profiles side
// by side.
func listenChild() (ln, pl net.Listener, err error) {
	if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, nil, err
	}
	if pl, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		ln.Close()
		return nil, nil, err
	}
	go func() { _ = http.Serve(pl, nil) }() //nolint:gosec // loopback profiling listener
	return ln, pl, nil
}

// child is a running child process.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	fields []string // the ready line's fields after "ready"
	log    string   // its stderr file
}

// startChild starts this executable with args and waits for its ready line.
func startChild(out, name string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{name: name, cmd: exec.Command(self, args...), log: filepath.Join(out, name+".log")}
	logFile, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	c.cmd.Stderr = logFile
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		f := strings.Fields(s)
		if len(f) >= 2 && f[0] == "ready" {
			c.fields = f[1:]
			return c, nil
		}
	case <-time.After(60 * time.Second):
	}
	c.stop()
	tail, _ := os.ReadFile(c.log)
	return nil, fmt.Errorf("%s did not start: %s", name, strings.TrimSpace(lastLines(string(tail), 5)))
}

// stop closes the child's stdin, which ends it, and kills it if it lingers.
func (c *child) stop() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpu returns the CPU time the child has used so far, user and system (Linux /proc).
func (c *child) cpu() (time.Duration, error) {
	return procCPU(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
}

// procCPU reads utime and stime from a /proc stat file. The command name (field 2) may hold
// spaces, so the fields are counted after its closing parenthesis.
func procCPU(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("%s: unexpected format", path)
	}
	// After the name: state (3), ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt,
	// majflt, cmajflt, utime (14), stime (15).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: unexpected utime %q or stime %q", path, f[11], f[12])
	}
	return time.Duration(ut+st) * clockTick, nil
}

// rss returns the child's resident memory now and its peak, in bytes (Linux /proc).
func (c *child) rss() (now, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			now = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if now == 0 {
		return 0, 0, errors.New("no VmRSS in /proc status")
	}
	return now, peak, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
