package bench

import (
	"context"
	"net"
	"sync/atomic"

	"golang.org/x/net/ipv4"
)

// wireCounter counts the bytes that cross the generator's sockets during a run: for HTTP/1.1
// and HTTP/2 what is read from and written to the TCP connections (HTTP and, for https, TLS
// records: the TCP payload), for HTTP/3 the payload of the UDP datagrams (QUIC packets, with
// their headers, encryption overhead, acknowledgements and handshake). Neither counts the IP,
// TCP or UDP headers.
type wireCounter struct {
	sent, received atomic.Uint64
}

// dialer wraps dial so that every connection it makes is counted.
func (wc *wireCounter) dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, wc: wc}, nil
	}
}

// countingConn is a net.Conn that adds what it reads and writes to a wireCounter.
type countingConn struct {
	net.Conn
	wc *wireCounter
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.wc.received.Add(uint64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.wc.sent.Add(uint64(n))
	return n, err
}

// countingUDPConn is a UDP socket for a quic.Transport that adds the datagrams' payload it reads
// and writes to a wireCounter. It keeps every capability quic-go uses on a *net.UDPConn —
// batched reads (ReadBatch), WriteMsgUDP with segmentation offload and ECN — so that counting
// does not change how QUIC sends: with a plain net.PacketConn quic-go would fall back to one
// system call per packet.
type countingUDPConn struct {
	*net.UDPConn
	batch *ipv4.PacketConn
	wc    *wireCounter
}

func newCountingUDPConn(c *net.UDPConn, wc *wireCounter) *countingUDPConn {
	return &countingUDPConn{UDPConn: c, batch: ipv4.NewPacketConn(c), wc: wc}
}

// ReadBatch reads several datagrams in one system call, as quic-go does on a *net.UDPConn.
// (ipv4's batch works for IPv6 sockets too: both are recvmmsg on Linux.)
func (c *countingUDPConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	n, err := c.batch.ReadBatch(ms, flags)
	var sum int
	for i := range n {
		sum += ms[i].N
	}
	c.wc.received.Add(uint64(sum))
	return n, err
}

// ReadMsgUDP counts the datagram read.
func (c *countingUDPConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	n, oobn, flags, addr, err = c.UDPConn.ReadMsgUDP(b, oob)
	c.wc.received.Add(uint64(n))
	return n, oobn, flags, addr, err
}

// WriteMsgUDP counts the payload written: with segmentation offload, one call carries several
// datagrams and n is their sum.
func (c *countingUDPConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	n, oobn, err = c.UDPConn.WriteMsgUDP(b, oob, addr)
	c.wc.sent.Add(uint64(n))
	return n, oobn, err
}

// ReadFrom counts the datagram read.
func (c *countingUDPConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.UDPConn.ReadFrom(b)
	c.wc.received.Add(uint64(n))
	return n, addr, err
}

// WriteTo counts the datagram written.
func (c *countingUDPConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	n, err := c.UDPConn.WriteTo(b, addr)
	c.wc.sent.Add(uint64(n))
	return n, err
}
