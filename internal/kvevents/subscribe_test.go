package kvevents

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// recorder is a Handler that keeps what it was told.
type recorder struct {
	mu        sync.Mutex
	resets    int
	connected bool
	hashes    []Hash // every hash of every event applied since the last reset
}

func (r *recorder) Reset() {
	r.mu.Lock()
	r.resets++
	r.hashes = nil
	r.mu.Unlock()
}

func (r *recorder) SetConnected(c bool) {
	r.mu.Lock()
	r.connected = c
	r.mu.Unlock()
}

func (r *recorder) Apply(b *Batch) {
	r.mu.Lock()
	for _, e := range b.Events {
		r.hashes = append(r.hashes, e.Hashes...)
	}
	r.mu.Unlock()
}

func (r *recorder) state() (resets int, connected bool, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resets, r.connected, len(r.hashes)
}

// eventually polls cond every 10 ms for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freeEndpoint returns a loopback TCP endpoint nothing listens on.
func freeEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	ln.Close()
	return ep
}

func storedBatch(t *testing.T, enc *Encoder, h Hash) []byte {
	t.Helper()
	p, err := enc.Encode(1, []Event{{Kind: BlockStored, Hashes: []Hash{h}, Tokens: []uint32{1, 2}, BlockSize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSubscriberReconnects: the subscription follows a publisher that comes up late, goes away
// and comes back on the same address (an engine restart), resetting the handler each time it
// reconnects, and applies what the new publisher sends.
func TestSubscriberReconnects(t *testing.T) {
	ep := freeEndpoint(t)
	rec := &recorder{}
	sub := Subscribe(ep, "", 1<<20, rec, nil)
	defer sub.Close()
	time.Sleep(100 * time.Millisecond) // the engine is not up yet: dials fail and are retried

	enc := NewEncoder()
	pub, err := NewPublisher(ep, "")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first connection", func() bool { return sub.Status().Connected })
	// A publisher drops what it sends before the subscription reaches it: publish until one
	// arrives, then count from there.
	published := uint64(0)
	eventually(t, "a first batch", func() bool {
		if pub.Publish(storedBatch(t, enc, 1)) {
			published++
		}
		time.Sleep(5 * time.Millisecond)
		_, _, n := rec.state()
		return n > 0
	})
	for i := range 50 {
		if !pub.Publish(storedBatch(t, enc, Hash(100+i))) {
			t.Fatal("batch dropped")
		}
	}
	published += 50
	eventually(t, "50 batches", func() bool { return sub.Status().Next == published })
	resets, _, n := rec.state()
	if n < 51 || resets != 1 || sub.Status().Gaps != 0 {
		t.Fatalf("after 50 batches: %d hashes, %d resets, status %+v", n, resets, sub.Status())
	}

	// The engine restarts: its publisher closes and opens again on the same address.
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the disconnection", func() bool { _, c, _ := rec.state(); return !c })
	pub, err = NewPublisher(ep, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	eventually(t, "the reconnection", func() bool { return sub.Status().Connects == 2 && sub.Status().Connected })
	resets, _, n = rec.state()
	if n != 0 || resets < 2 {
		t.Fatalf("after the reconnection: %d hashes kept, %d resets", n, resets)
	}
	eventually(t, "a batch after the restart", func() bool {
		pub.Publish(storedBatch(t, enc, 7))
		time.Sleep(5 * time.Millisecond)
		_, _, n := rec.state()
		return n > 0
	})
}

// TestSubscriberResetsOnGap: a message whose sequence is not the next one (lost messages, or a
// publisher that restarted behind the same connection) resets the handler.
func TestSubscriberResetsOnGap(t *testing.T) {
	ep := freeEndpoint(t)
	pub := zmq4.NewPub(context.Background())
	if err := pub.Listen(ep); err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	rec := &recorder{}
	sub := Subscribe(ep, "kv", 1<<20, rec, nil)
	defer sub.Close()
	enc := NewEncoder()
	send := func(seq uint64, h Hash) {
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		if err := pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), s[:], storedBatch(t, enc, h))); err != nil {
			t.Fatal(err)
		}
	}
	// Until the subscription is up, what is published is dropped, so the first batch is sent
	// until one arrives. Each try carries the next sequence number: a try that arrives after an
	// earlier one is in order, and once the newest has arrived no older one is still in flight.
	seq := uint64(9)
	eventually(t, "a first batch", func() bool {
		seq++
		send(seq, 1)
		time.Sleep(5 * time.Millisecond)
		return sub.Status().Next == seq+1
	})
	if g := sub.Status().Gaps; g != 0 {
		t.Fatalf("tries sent in order counted %d gaps", g)
	}
	resets, _, _ := rec.state()
	send(seq+1, 2)
	eventually(t, "the next in order", func() bool { return sub.Status().Next == seq+2 })
	if r, _, n := rec.state(); r != resets || n == 0 {
		t.Fatalf("in order: %d resets (was %d), %d hashes", r, resets, n)
	}
	send(seq+10, 3) // seq+2 … seq+9 lost
	eventually(t, "after the gap", func() bool { return sub.Status().Next == seq+11 })
	if r, _, n := rec.state(); r != resets+1 || n != 1 || sub.Status().Gaps != 1 {
		t.Fatalf("after a gap: %d resets (was %d), %d hashes, status %+v", r, resets, n, sub.Status())
	}
	send(0, 4) // a restarted publisher
	eventually(t, "seq 0", func() bool { return sub.Status().Next == 1 })
	if r, _, _ := rec.state(); r != resets+2 {
		t.Fatalf("after a restart: %d resets (was %d)", r, resets)
	}
}
