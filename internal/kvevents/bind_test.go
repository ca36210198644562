package kvevents

import (
	"testing"
)

// TestBound: llm-d's topology. The gateway binds one endpoint; two engines connect to it and
// publish under their own topics; each subscription follows its engine's messages only. An
// engine that goes away and comes back (a new connection, its sequence from 0) starts its
// subscription anew; the other's is untouched.
func TestBound(t *testing.T) {
	var ra, rb recorder
	sa := Subscribe("tcp://*:0", "kv@10.0.0.5:8000@m", 0, &ra, nil)
	defer sa.Close()
	sb := Subscribe("tcp://*:0", "kv@10.0.0.6:8000@m", 0, &rb, nil)
	defer sb.Close()
	addr := BoundAddr("tcp://*:0")
	if addr == "" {
		t.Fatal("not bound")
	}
	ep := "tcp://127.0.0.1" + addr[len(addr)-len(portOf(addr)):]
	pa, err := DialPublisher(ep, "kv@10.0.0.5:8000@m")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := DialPublisher(ep, "kv@10.0.0.6:8000@m")
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	enc := NewEncoder()
	// A PUB socket drops what it sends before the subscription reaches it: publish until seen.
	eventually(t, "a's first batch", func() bool {
		pa.Publish(storedBatch(t, enc, 1))
		_, c, _ := ra.state()
		return c
	})
	eventually(t, "b's first batch", func() bool {
		pb.Publish(storedBatch(t, enc, 2))
		_, c, _ := rb.state()
		return c
	})
	ra.mu.Lock()
	for _, h := range ra.hashes {
		if h != 1 {
			t.Errorf("a's subscription got hash %d of b's engine", h)
		}
	}
	ra.mu.Unlock()
	resetsB, _, _ := rb.state()

	// a's engine restarts: its connection closes, a new one counts from 0.
	pa.Close()
	eventually(t, "a's departure", func() bool { _, c, _ := ra.state(); return !c })
	pa2, err := DialPublisher(ep, "kv@10.0.0.5:8000@m")
	if err != nil {
		t.Fatal(err)
	}
	defer pa2.Close()
	eventually(t, "a's return", func() bool {
		pa2.Publish(storedBatch(t, enc, 3))
		_, c, n := ra.state()
		return c && n > 0
	})
	if st := sa.Status(); st.Connects != 2 {
		t.Errorf("a: %+v, want 2 connections", st)
	}
	if r, c, _ := rb.state(); r != resetsB || !c {
		t.Errorf("b: %d resets (was %d), connected %v: a's restart touched b", r, resetsB, c)
	}
	sa.Close()
	sb.Close()
	if BoundAddr("tcp://*:0") != "" {
		t.Error("the listener outlived its subscriptions")
	}
}

// portOf returns addr's port with its colon.
func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i:]
		}
	}
	return ""
}
