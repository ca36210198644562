package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

const cfgOne = "engines: {s: {kind: sim}}\nmodels: {one: {engines: [s]}}\n"

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newTestReloader(t *testing.T, text string) (*reloader, *layer0.Gateway, *syncbuf.Buffer, *slog.LevelVar) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layer0.yaml")
	writeFile(t, path, text)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	var log syncbuf.Buffer
	level := new(slog.LevelVar)
	r := newReloader(path, g, slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: level})), level)
	r.settle = 20 * time.Millisecond // every file a test writes is fresh: keep the settling short
	return r, g, &log, level
}

func models(g *layer0.Gateway) string {
	return modelList(g.Config())
}

func TestReloaderPoll(t *testing.T) {
	r, g, log, level := newTestReloader(t, cfgOne)
	first := g.Config()
	r.poll()
	if g.Config() != first {
		t.Fatal("poll without a change reloaded")
	}

	// An edit is picked up by the next poll.
	writeFile(t, r.path, "engines: {s: {kind: sim}}\nmodels: {one: {engines: [s]}, two: {engines: [s]}}\nlog: {level: debug}\n")
	r.poll()
	if got := models(g); got != "one, two" {
		t.Errorf("after an edit: models %q, want \"one, two\"", got)
	}
	if level.Level() != slog.LevelDebug {
		t.Errorf("log level: got %v, want debug from the new file", level.Level())
	}
	if !strings.Contains(log.String(), `"msg":"config reloaded"`) || !strings.Contains(log.String(), `"reason":"file changed"`) {
		t.Errorf("log: got %s, want a reload record", log.String())
	}

	// Touching the file without changing it is not a reload.
	second := g.Config()
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(r.path, future, future); err != nil {
		t.Fatal(err)
	}
	r.poll()
	if g.Config() != second {
		t.Error("a touch reloaded")
	}

	// A broken edit is rejected with every problem logged; the running configuration stays.
	writeFile(t, r.path, "engines: {s: {kind: warp}}\nmodels: {one: {engines: [s, ghost]}}\nrouting: {picker: dice}\n")
	r.poll()
	if g.Config() != second {
		t.Error("a broken file replaced the running configuration")
	}
	out := log.String()
	for _, want := range []string{"config reload rejected", `engines.s.kind: unknown kind \"warp\"`,
		`models.one.engines[1]: unknown engine \"ghost\"`, `routing.picker: unknown picker \"dice\"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	// The same broken content is not retried every second.
	n := strings.Count(log.String(), "config reload rejected")
	r.poll()
	if got := strings.Count(log.String(), "config reload rejected"); got != n {
		t.Errorf("rejections: got %d, want %d (the broken version is rejected once)", got, n)
	}
	// A missing file is reported, and serving goes on.
	if err := os.Remove(r.path); err != nil {
		t.Fatal(err)
	}
	r.poll()
	if !strings.Contains(log.String(), "config file unreadable") || g.Config() != second {
		t.Errorf("missing file: log %s", log.String())
	}
}

func TestReloaderRunSIGHUPAndTicks(t *testing.T) {
	r, g, _, _ := newTestReloader(t, cfgOne)
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		r.run(ctx, hup, tick)
		close(done)
	}()
	// SIGHUP reloads even what polling would call unchanged: keep the fingerprint, change the
	// file, and signal.
	writeFile(t, r.path, "engines: {s: {kind: sim}}\nmodels: {three: {engines: [s]}}\n")
	r.last, _ = fingerprintOf(r.path)
	hup <- syscall.SIGHUP
	tick <- time.Now() // run handled the signal before taking the tick
	if got := models(g); got != "three" {
		t.Errorf("after SIGHUP: models %q, want three", got)
	}
	writeFile(t, r.path, "engines: {s: {kind: sim}}\nmodels: {four: {engines: [s]}}\n")
	tick <- time.Now()
	tick <- time.Now()
	if got := models(g); got != "four" {
		t.Errorf("after a tick: models %q, want four", got)
	}
	cancel()
	<-done
}

// TestReloadKeepsListenAddr checks that a reload keeps the address in force (it cannot move
// without a restart) and warns that the file's new one is not applied.
func TestReloadKeepsListenAddr(t *testing.T) {
	r, g, log, _ := newTestReloader(t, cfgOne)
	writeFile(t, r.path, "server: {addr: '127.0.0.1:9999'}\n"+cfgOne)
	if !r.reload("test") {
		t.Fatalf("reload refused: %s", log.String())
	}
	if got := g.Config().Server.Addr; got != "127.0.0.1:8080" {
		t.Errorf("addr: got %s, want the running 127.0.0.1:8080", got)
	}
	if !strings.Contains(log.String(), "apply only after a restart") {
		t.Errorf("no warning about the listener: %s", log.String())
	}
}

func TestServeRefusesOpenAddrWithoutKeys(t *testing.T) {
	var out, errOut bytes.Buffer
	err := runServe([]string{"--addr", "0.0.0.0:0"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("got %v, want a refusal naming the loopback rule", err)
	}
}

// TestServeSaysWhenAuthless starts the real command on loopback without keys, checks that it
// says it serves without auth, and stops it with SIGTERM (which it has registered by then).
func TestServeSaysWhenAuthless(t *testing.T) {
	var out, errOut syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--addr", "127.0.0.1:0"}, &out, &errOut) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "WITHOUT AUTH") {
		if time.Now().After(deadline) {
			t.Fatalf("no start message; stdout %q stderr %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(errOut.String(), "serving without auth on a loopback address") {
		t.Errorf("process log: %q, want the warning", errOut.String())
	}
	stopServe(t, done)
}

// rejected checks that the last reload was refused with an ERROR record containing want, and
// that the running configuration is still was.
func rejected(t *testing.T, g *layer0.Gateway, was *config.Config, log *syncbuf.Buffer, want string) {
	t.Helper()
	if g.Config() != was {
		t.Errorf("the running configuration was replaced (models now %q)", models(g))
	}
	var last string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		last = line
	}
	if !strings.Contains(last, `"level":"ERROR"`) || !strings.Contains(last, "config reload rejected") ||
		!strings.Contains(last, want) {
		t.Errorf("last log record: %s\nwant an ERROR rejecting the reload, containing %q", last, want)
	}
}

const cfgBlock = "engines:\n  s: {kind: sim}\nmodels:\n  one: {engines: [s]}\n  two: {engines: [s]}\n"

// TestReloadRefusesEmptyAndPartialFiles checks the moments of a non-atomic write: an empty file
// and files cut short are errors, logged at ERROR, and the running configuration keeps serving.
func TestReloadRefusesEmptyAndPartialFiles(t *testing.T) {
	r, g, log, _ := newTestReloader(t, cfgBlock)
	was := g.Config()
	for _, tt := range []struct{ name, text, want string }{
		{"empty", "", "the file is empty"},
		{"blank", "\n  \n# nothing yet\n", "the file is empty"},
		{"cut after a section's key", "engines:\n", "engines: the section has no value"},
		{"cut inside a line", cfgBlock[:strings.Index(cfgBlock, "wo:")], "could not find expected ':'"},
		{"cut inside a value", cfgBlock[:len(cfgBlock)-9], "did not find expected ','"},
		{"cut inside a flow mapping", "engines: {s: {kind: sim}}\nmodels: {one: {engi", "line"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, r.path, tt.text)
			r.poll()
			rejected(t, g, was, log, tt.want)
		})
	}
	writeFile(t, r.path, cfgBlock+"  three: {engines: [s]}\n")
	r.poll()
	if got := models(g); got != "one, three, two" {
		t.Errorf("after the complete file: models %q, want one, three, two", got)
	}
}

// TestReloadWaitsForAFileWrittenInTwoHalves writes a file in place in two halves, the first a
// valid configuration on its own, the second while the reloader waits for the file to settle:
// only the whole file is applied.
func TestReloadWaitsForAFileWrittenInTwoHalves(t *testing.T) {
	r, g, log, _ := newTestReloader(t, cfgOne)
	half := strings.Index(cfgBlock, "  two:")
	writeFile(t, r.path, cfgBlock[:half]+"  three: {engines: [s]}\n")
	if _, err := config.Parse([]byte(cfgBlock[:half] + "  three: {engines: [s]}\n")); err != nil {
		t.Fatalf("the first half must load on its own for this test: %v", err)
	}
	sleeps := 0
	r.sleep = func(d time.Duration) {
		if sleeps++; sleeps == 1 { // the writer finishes while the reloader waits
			writeFile(t, r.path, cfgBlock[:half]+"  three: {engines: [s]}\n"+cfgBlock[half:])
		}
		time.Sleep(d)
	}
	r.poll()
	if got := models(g); got != "one, three, two" {
		t.Errorf("models %q, want the whole file's one, three, two", got)
	}
	if n := strings.Count(log.String(), `"msg":"config reloaded"`); n != 1 {
		t.Errorf("%d reloads, want 1 (the half file must not be applied):\n%s", n, log.String())
	}
	if sleeps == 0 {
		t.Error("the fresh file was applied without waiting for it to settle")
	}

	// A file left alone longer than the settle time is read at once.
	writeFile(t, r.path, cfgOne)
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(r.path, old, old); err != nil {
		t.Fatal(err)
	}
	sleeps = 0
	r.poll()
	if got := models(g); got != "one" || sleeps != 0 {
		t.Errorf("a settled file: models %q after %d waits, want one after none", got, sleeps)
	}
}

// TestReloadWaitsOutAWriterThatPauses writes a file in place as a slow writer does: the first
// half (a valid configuration on its own), a pause of 0.6s, the rest. With the real settle time
// and real sleeps, polled right after the first half and again during the pause, only the whole
// file is ever applied.
func TestReloadWaitsOutAWriterThatPauses(t *testing.T) {
	for _, pollAfter := range []time.Duration{0, 400 * time.Millisecond} {
		r, g, log, _ := newTestReloader(t, cfgOne)
		r.settle = settleTime
		half := strings.Index(cfgBlock, "  two:")
		first := cfgBlock[:half] + "  three: {engines: [s]}\n"
		f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(first); err != nil {
			t.Fatal(err)
		}
		wrote := make(chan error, 1)
		go func() {
			time.Sleep(600 * time.Millisecond)
			_, err := f.WriteString(cfgBlock[half:])
			wrote <- errors.Join(err, f.Close())
		}()
		time.Sleep(pollAfter)
		r.poll()
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		r.poll() // the whole file, if the first poll did not wait for it
		if got := models(g); got != "one, three, two" {
			t.Errorf("polled %v after the first half: models %q, want the whole file's one, three, two", pollAfter, got)
		}
		if n := strings.Count(log.String(), `"msg":"config reloaded"`); n != 1 {
			t.Errorf("polled %v after the first half: %d reloads, want 1 (the half file must not be applied):\n%s", pollAfter, n, log.String())
		}
	}
}

// TestReloadRefusesRemovingAllKeys checks that a file without keys cannot turn auth off while
// keys are in force, unless it says so.
func TestReloadRefusesRemovingAllKeys(t *testing.T) {
	withKey := "keys:\n  - {name: a, hash: " + auth.HashHex("l0-reload") + "}\n" + cfgOne
	r, g, log, _ := newTestReloader(t, withKey)
	was := g.Config()
	writeFile(t, r.path, cfgOne)
	r.poll()
	rejected(t, g, was, log, "no keys while 1 are in force")
	if len(g.Config().Keys) != 1 {
		t.Fatalf("keys in force: %d, want 1", len(g.Config().Keys))
	}
	writeFile(t, r.path, "auth: {allow_none: true}\n"+cfgOne)
	r.poll()
	if len(g.Config().Keys) != 0 {
		t.Errorf("with auth.allow_none: %d keys in force, want none: %s", len(g.Config().Keys), log.String())
	}
}

// stopServe sends this process SIGTERM, as an operator would stop `layer0 serve`, and waits for
// the command running in the test (its result on done) to drain and return without an error.
func stopServe(t *testing.T, done <-chan error) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
}
