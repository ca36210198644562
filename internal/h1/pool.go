package h1

import (
	"context"
	"net"
	"sync"
	"time"
)

// Pool keeps idle keep-alive connections to one address and dials new ones. The most recently
// used connection is handed out first (the one least likely to have been closed by the server
// meanwhile); connections idle longer than IdleTimeout are closed when met. It is safe for
// concurrent use; set its fields before the first Get.
type Pool struct {
	// Addr is the host:port dialed.
	Addr string
	// Dialer dials new connections; nil means a zero net.Dialer.
	Dialer *net.Dialer
	// MaxIdle bounds the idle connections kept; 0 means 64.
	MaxIdle int
	// IdleTimeout closes connections idle for longer; 0 means 90 seconds.
	IdleTimeout time.Duration
	// ReadSize is each connection's read buffer, in bytes; 0 means 4 KiB.
	ReadSize int

	mu     sync.Mutex
	idle   []idleConn
	closed bool // set by Close: connections given back are closed, not kept
}

type idleConn struct {
	c     *Conn
	since time.Time
}

// Get returns an idle connection, or dials one with ctx.
func (p *Pool) Get(ctx context.Context) (*Conn, error) {
	if c := p.TakeIdle(); c != nil {
		return c, nil
	}
	return p.Dial(ctx)
}

// TakeIdle returns the most recently used idle connection, or nil when there is none.
func (p *Pool) TakeIdle() *Conn {
	timeout := p.IdleTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
	}
	var stale []*Conn
	p.mu.Lock()
	var c *Conn
	for n := len(p.idle); n > 0; n = len(p.idle) {
		ic := p.idle[n-1]
		p.idle[n-1] = idleConn{}
		p.idle = p.idle[:n-1]
		if time.Since(ic.since) < timeout {
			c = ic.c
			break
		}
		stale = append(stale, ic.c)
	}
	p.mu.Unlock()
	for _, s := range stale {
		_ = s.Close()
	}
	return c
}

// Dial opens a new connection (never an idle one), with TCP_NODELAY as Go sets it by default.
func (p *Pool) Dial(ctx context.Context) (*Conn, error) {
	d := p.Dialer
	if d == nil {
		d = &net.Dialer{}
	}
	nc, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, err
	}
	return NewConn(nc, p.ReadSize), nil
}

// Put gives c back once its response is done with: it is kept for the next Get when it is
// Reusable and there is room, else closed.
func (p *Pool) Put(c *Conn) {
	if !c.Reusable() {
		_ = c.Close()
		return
	}
	max := p.MaxIdle
	if max <= 0 {
		max = 64
	}
	p.mu.Lock()
	if p.closed || len(p.idle) >= max {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.idle = append(p.idle, idleConn{c, time.Now()})
	p.mu.Unlock()
}

// CloseIdle closes the idle connections; connections in use are not affected.
func (p *Pool) CloseIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, ic := range idle {
		_ = ic.c.Close()
	}
}

// Close closes the idle connections and every connection given back later: a closed pool keeps
// none. Connections in use are not affected until they are given back; Get still dials.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.CloseIdle()
}

// Idle returns the number of idle connections.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
