package kvevents

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// The bound topology, llm-d's: the engines connect to the gateway. One SUB endpoint bound by
// the gateway ("tcp://*:5557": a * host binds, as vLLM's publisher does) receives every
// engine's PUB connection, and the ZeroMQ topic of each message (vLLM's `kv@<pod-ip>:<port>@
// <model>` in llm-d) says whose it is: each replica follows the messages whose topic starts
// with its events_topic. A listener is shared by every subscription of its endpoint, in this
// process, and closed with the last of them, so a reload that keeps an engine keeps its
// connections.

// Binds reports whether endpoint is one the subscriber binds (a * host) rather than connects to.
func Binds(endpoint string) bool { return strings.HasPrefix(endpoint, "tcp://*:") }

// hub is one bound endpoint: its listener and the subscriptions that follow topics on it.
type hub struct {
	endpoint string
	ln       net.Listener
	log      *slog.Logger

	mu      sync.Mutex
	follows []*Subscriber
	conns   map[net.Conn]struct{}
}

var (
	hubsMu sync.Mutex
	hubs   = map[string]*hub{}
)

// subscribeBound is Subscribe for an endpoint the subscriber binds: s follows its topic on the
// endpoint's shared listener, bound on first use.
func subscribeBound(s *Subscriber) {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	hb := hubs[s.endpoint]
	if hb == nil {
		addr := "0.0.0.0" + strings.TrimPrefix(s.endpoint, "tcp://*")
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			s.log.Warn("kv events: cannot bind the endpoint the engines connect to", "endpoint", s.endpoint, "err", err)
			close(s.done)
			return
		}
		hb = &hub{endpoint: s.endpoint, ln: ln, log: s.log, conns: map[net.Conn]struct{}{}}
		hubs[s.endpoint] = hb
		go hb.accept()
		s.log.Info("kv events: bound; the engines connect here", "endpoint", s.endpoint, "addr", ln.Addr().String())
	}
	hb.mu.Lock()
	hb.follows = append(hb.follows, s)
	hb.mu.Unlock()
	s.hub = hb
	close(s.done)
}

// BoundAddr returns the address the listener of a bound endpoint listens on ("" when none):
// its port resolved, for tests.
func BoundAddr(endpoint string) string {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	if hb := hubs[endpoint]; hb != nil {
		return hb.ln.Addr().String()
	}
	return ""
}

// unfollow removes s from its hub, closing the hub with its last subscription.
func (hb *hub) unfollow(s *Subscriber) {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	hb.mu.Lock()
	found := false
	for i, f := range hb.follows {
		if f == s {
			hb.follows = append(hb.follows[:i], hb.follows[i+1:]...)
			found = true
			break
		}
	}
	last := found && len(hb.follows) == 0
	if last {
		for c := range hb.conns {
			c.Close()
		}
	}
	hb.mu.Unlock()
	if last {
		hb.ln.Close()
		delete(hubs, hb.endpoint)
	}
}

// accept serves each engine's connection until the listener closes.
func (hb *hub) accept() {
	for {
		c, err := hb.ln.Accept()
		if err != nil {
			return
		}
		hb.mu.Lock()
		hb.conns[c] = struct{}{}
		hb.mu.Unlock()
		go hb.serve(c)
	}
}

// serve reads one engine's connection: handshake, then every message to the subscriptions
// whose topic it starts with.
func (hb *hub) serve(c net.Conn) {
	var seen []*Subscriber // the subscriptions this connection delivered to
	defer func() {
		c.Close()
		hb.mu.Lock()
		delete(hb.conns, c)
		hb.mu.Unlock()
		for _, s := range seen {
			s.leave(c)
		}
	}()
	z := newZMTPConn(c, MinMaxBytes)
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := z.handshake(""); err != nil {
		hb.log.Debug("kv events: an engine's connection failed its handshake", "endpoint", hb.endpoint, "err", err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	for {
		z.max = hb.maxBytes()
		frames, err := z.recv()
		if err != nil {
			return
		}
		if len(frames) != 3 || len(frames[1]) != 8 {
			continue
		}
		for _, s := range hb.followers(frames[0]) {
			if s.deliver(c, binary.BigEndian.Uint64(frames[1]), frames[2]) && !containsSub(seen, s) {
				seen = append(seen, s)
			}
		}
	}
}

func containsSub(l []*Subscriber, s *Subscriber) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// followers returns the subscriptions whose topic topic starts with.
func (hb *hub) followers(topic []byte) []*Subscriber {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	var out []*Subscriber
	for _, s := range hb.follows {
		if bytes.HasPrefix(topic, []byte(s.topic)) {
			out = append(out, s)
		}
	}
	return out
}

// maxBytes is the largest bound of the hub's subscriptions.
func (hb *hub) maxBytes() int {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	n := MinMaxBytes
	for _, s := range hb.follows {
		n = max(n, s.maxBytes)
	}
	return n
}

// bound is a bound subscription's state: the engine connection it follows now and its
// sequence there.
type bound struct {
	mu    sync.Mutex
	conn  net.Conn
	last  uint64
	dec   *Decoder
	batch Batch
}

// deliver applies one message received on c; it reports whether it was s's. A message on
// another connection than the one followed so far is the engine's new connection (it
// restarted, or reconnected): the handler starts anew.
func (s *Subscriber) deliver(c net.Conn, seq uint64, payload []byte) bool {
	b := &s.bound
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != c {
		b.conn = c
		s.connects.Add(1)
		s.h.Reset()
		s.connected.Store(true)
		s.h.SetConnected(true)
		s.log.Info("kv events: an engine connected", "endpoint", s.endpoint, "topic", s.topic, "from", c.RemoteAddr().String())
		if b.dec == nil {
			b.dec = NewDecoder()
		}
	} else if seq != b.last+1 {
		s.gaps.Add(1)
		s.gap(b.last+1, seq)
	}
	b.last = seq
	s.apply(b.dec, &b.batch, payload)
	s.next.Store(seq + 1)
	return true
}

// leave notes that connection c closed: if s followed it, the engine is away.
func (s *Subscriber) leave(c net.Conn) {
	b := &s.bound
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != c {
		return
	}
	b.conn = nil
	if s.connected.Swap(false) {
		s.h.SetConnected(false)
		s.h.Reset()
		s.log.Warn("kv events: the engine's connection closed", "endpoint", s.endpoint, "topic", s.topic)
	}
}
