// Package redistest runs a real redis-server for tests: on a free loopback port, with no
// persistence, stopped when the test ends. A test that needs one is skipped, with a message
// saying how to install it, when the redis-server binary is absent.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is one redis-server process on a fixed loopback port: stopping and starting it again
// keeps the address, as a restarted Redis behind a Service would.
type Server struct {
	// Addr is HOST:PORT.
	Addr string
	t    testing.TB
	bin  string
	cmd  *exec.Cmd
	// extra are more redis-server arguments (cluster mode).
	extra []string
}

// Start starts a redis-server for t, or skips t when the binary is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install -y redis-server); skipping the Redis tests")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{Addr: addr, t: t, bin: bin}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Stop kills the server (SIGKILL: no goodbye to the clients) and waits for it to exit. It is a
// no-op when stopped.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server (again) on its address and waits until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--save", "", "--appendonly", "no", "--port", port, "--bind", "127.0.0.1",
		"--daemonize", "no", "--loglevel", "warning"}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(s.Addr); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends PING over RESP and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %s", strconv.Quote(line))
	}
	return nil
}

// Cluster is a Redis Cluster of real redis-server processes (masters only), on loopback.
type Cluster struct {
	// Nodes are the masters.
	Nodes []*Server
}

// URLs are the nodes' redis:// URLs, the seed list of a cluster client.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// StartCluster starts masters redis-servers in cluster mode, joins them with
// `redis-cli --cluster create` and waits until the cluster is ok. It skips t when redis-server or
// redis-cli is not installed.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed (apt-get install -y redis-server); skipping the Redis Cluster tests")
	}
	dir := t.TempDir()
	c := &Cluster{}
	for range masters {
		s := Start(t)
		s.Stop()
		_, port := splitPort(s.Addr)
		s.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", dir + "/nodes-" + port + ".conf",
			"--cluster-node-timeout", "2000"}
		s.Restart()
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range c.Nodes {
		for {
			_, port := splitPort(n.Addr)
			out, err := exec.Command(cli, "-p", port, "cluster", "info").Output()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok after 20s: %s %v", out, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func splitPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}
