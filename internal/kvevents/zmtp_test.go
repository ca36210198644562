package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// zmtpPeer is a raw ZMTP 3 publisher written for the tests: it speaks the greeting and the
// NULL handshake itself, so that it can send what no ZeroMQ library would.
type zmtpPeer struct {
	t  *testing.T
	ln net.Listener
}

func newZMTPPeer(t *testing.T) *zmtpPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &zmtpPeer{t: t, ln: ln}
}

func (p *zmtpPeer) endpoint() string { return "tcp://" + p.ln.Addr().String() }

// accept takes the subscriber's next connection and does the handshake: it checks that the
// subscriber announces a SUB socket and subscribes to topic.
func (p *zmtpPeer) accept(topic string) (net.Conn, error) {
	_ = p.ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	c, err := p.ln.Accept()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	g := greeting
	g[11] = 1 // a 3.1 publisher, as libzmq's
	g[32] = 1 // as-server
	if _, err := c.Write(g[:]); err != nil {
		return nil, err
	}
	var in [greetingLen]byte
	if _, err := io.ReadFull(c, in[:]); err != nil {
		return nil, err
	}
	if in[0] != 0xFF || in[9] != 0x7F || in[10] != 3 || string(in[12:16]) != "NULL" {
		return nil, errors.New("bad greeting from the subscriber")
	}
	z := newZMTPConn(c, 1<<16)
	flags, body, err := z.frame(1 << 16)
	if err != nil {
		return nil, err
	}
	name, props, err := command(body)
	if err != nil || flags&flagCommand == 0 || name != "READY" {
		return nil, errors.New("the subscriber did not send READY first")
	}
	if st, err := property(props, "Socket-Type"); err != nil || st != "SUB" {
		return nil, errors.New("the subscriber is not a SUB socket")
	}
	if _, err := c.Write(appendFrame(nil, flagCommand, appendProperty([]byte("\x05READY"), "Socket-Type", "PUB"))); err != nil {
		return nil, err
	}
	z.buf = z.buf[:0]
	_, sub, err := z.frame(1 << 16)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(sub, append([]byte{1}, topic...)) {
		return nil, errors.New("the subscriber did not subscribe to the topic")
	}
	return c, nil
}

// closedByPeer reports whether c was closed by the other side: a read sees the end of the
// stream (or a reset) before the deadline.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestSubscriberDropsOversizedFrame: a publisher that announces a frame past the bound — 1 TiB
// as the topic frame, 2^50 bytes as the payload frame after a valid topic and sequence — has
// its connection closed before the frame is read (with a ZeroMQ library both ended the
// process: out of memory, a makeslice panic); the subscription reconnects with backoff and
// applies the batches a well-behaved publisher sends on the same address.
func TestSubscriberDropsOversizedFrame(t *testing.T) {
	peer := newZMTPPeer(t)
	rec := &recorder{}
	sub := Subscribe(peer.endpoint(), "kv", 1<<20, rec, nil)
	defer sub.Close()

	long := func(flags byte, size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
	}
	var seq [8]byte
	attacks := []struct {
		name string
		send []byte
	}{
		{"a 1 TiB topic frame", long(flagMore, 1<<40)},
		{"a 2^50-byte payload frame", append(append(appendFrame(appendFrame(nil, flagMore, []byte("kv")), flagMore, seq[:]),
			long(0, 1<<50)...), "partial"...)},
		{"a payload one byte past the bound", append(appendFrame(appendFrame(nil, flagMore, []byte("kv")), flagMore, seq[:]),
			long(0, 1<<20-10+1)...)},
	}
	for i, a := range attacks {
		c, err := peer.accept("kv")
		if err != nil {
			t.Fatalf("%s: handshake: %v", a.name, err)
		}
		if _, err := c.Write(a.send); err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		if !closedByPeer(c) {
			t.Fatalf("%s: the subscriber kept the connection open", a.name)
		}
		c.Close()
		if st := sub.Status(); st.TooLarge != uint64(i+1) || st.Connects != uint64(i+1) {
			t.Fatalf("after %s: status %+v, want TooLarge %d", a.name, st, i+1)
		}
	}

	// The publisher behaves: batches flow again.
	c, err := peer.accept("kv")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	enc := NewEncoder()
	for i := range 3 {
		binary.BigEndian.PutUint64(seq[:], uint64(i))
		msg := appendFrame(appendFrame(appendFrame(nil, flagMore, []byte("kv")), flagMore, seq[:]), 0, storedBatch(t, enc, Hash(1+i)))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "three batches after the reconnection", func() bool { return sub.Status().Next == 3 })
	if _, connected, n := rec.state(); !connected || n != 3 {
		t.Fatalf("after the reconnection: connected %v, %d hashes, want 3", connected, n)
	}
	if st := sub.Status(); st.Messages != 3 || st.Malformed != 0 || st.TooLarge != uint64(len(attacks)) {
		t.Fatalf("status %+v", st)
	}
}

// TestZMTPAnswersHeartbeat: a PING from a ZMTP 3.1 publisher is answered with a PONG carrying
// its context, and a message within the bound at its exact size is read.
func TestZMTPAnswersHeartbeat(t *testing.T) {
	peer := newZMTPPeer(t)
	rec := &recorder{}
	sub := Subscribe(peer.endpoint(), "", MinMaxBytes, rec, nil)
	defer sub.Close()
	c, err := peer.accept("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(appendFrame(nil, flagCommand, []byte("\x04PING\x00\x64ctx"))); err != nil {
		t.Fatal(err)
	}
	z := newZMTPConn(c, 1<<16)
	flags, body, err := z.frame(1 << 16)
	if err != nil || flags != flagCommand || string(body) != "\x04PONGctx" {
		t.Fatalf("got frame %#x %q, %v; want a PONG with the context", flags, body, err)
	}
	enc := NewEncoder()
	payload := storedBatch(t, enc, 9)
	var seq [8]byte
	// The three frames fill the bound exactly.
	topic := bytes.Repeat([]byte("t"), MinMaxBytes-8-len(payload))
	msg := appendFrame(appendFrame(appendFrame(nil, flagMore, topic), flagMore, seq[:]), 0, payload)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the batch", func() bool { return sub.Status().Next == 1 })
	if st := sub.Status(); st.Messages != 1 || st.TooLarge != 0 {
		t.Fatalf("status %+v", st)
	}
}

// FuzzZMTPRecv feeds any bytes to the frame reader after a handshake: it never panics, never
// holds more than its bound, and returns messages of one to maxFrames frames.
func FuzzZMTPRecv(f *testing.F) {
	var seq [8]byte
	f.Add(appendFrame(appendFrame(appendFrame(nil, flagMore, []byte("kv")), flagMore, seq[:]), 0, []byte{0x92, 0, 0x90}))
	f.Add(binary.BigEndian.AppendUint64([]byte{flagLong}, 1<<50))
	f.Add(appendFrame(nil, flagCommand, []byte("\x04PING\x00\x10abc")))
	f.Add(appendFrame(nil, flagCommand|flagLong, bytes.Repeat([]byte{'x'}, 300)))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() { _, _ = io.Copy(io.Discard, b) }() // takes the PONGs
		const bound = 4096
		z := newZMTPConn(a, bound)
		z.r.Reset(bytes.NewReader(data))
		for range 1000 {
			frames, err := z.recv()
			if err != nil {
				return
			}
			total := 0
			for _, fr := range frames {
				total += len(fr)
			}
			if len(frames) == 0 || len(frames) > maxFrames || total > bound {
				t.Fatalf("%d frames of %d bytes", len(frames), total)
			}
		}
	})
}
