package kvevents

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/go-zeromq/zmq4"
)

// TestReplay: a gap in the sequence is repaired from the engine's replay endpoint — the batches
// missed are applied in order and the handler keeps what it knew — and a gap the endpoint no
// longer buffers empties the handler as before.
func TestReplay(t *testing.T) {
	pub := zmq4.NewPub(context.Background())
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	rs, err := NewReplayServer("tcp://127.0.0.1:0", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	enc := NewEncoder()
	payload := func(i int) []byte { return storedBatch(t, enc, Hash(100+i)) }
	send := func(seq int) {
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], uint64(seq))
		if err := pub.SendMulti(zmq4.NewMsgFrom([]byte("t"), s[:], payload(seq))); err != nil {
			t.Fatal(err)
		}
	}
	var r recorder
	sub := Subscribe("tcp://"+pub.Addr().String(), "t", 0, &r, nil, WithReplay(rs.Endpoint()))
	defer sub.Close()
	eventually(t, "the subscription", func() bool { return sub.Status().Connected })
	// A first batch until one arrives (a PUB socket drops what it sends before the
	// subscription). Each try carries the next sequence number, so a late try is in order, and
	// once the newest has arrived none is still in flight: b is the base from then on.
	b := -1
	eventually(t, "the first batch", func() bool { b++; send(b); return sub.Status().Next == uint64(b+1) })
	for i := range 6 {
		rs.Keep(uint64(b+i), payload(b+i))
	}
	send(b + 1)
	eventually(t, "batch b+1", func() bool { return sub.Status().Next == uint64(b+2) })
	resets, _, before := r.state()
	send(b + 5) // b+2 to b+4 lost
	eventually(t, "batch b+5", func() bool { return sub.Status().Next == uint64(b+6) })
	st := sub.Status()
	after, _, n := r.state()
	if st.Replays != 1 || after != resets || n != before+4 {
		t.Fatalf("%+v: %d resets (was %d), %d hashes (was %d): want the gap replayed", st, after, resets, n, before)
	}
	send(b + 9) // b+6 to b+8 lost; the server keeps b+2 to b+5 only
	eventually(t, "batch b+9", func() bool { return sub.Status().Next == uint64(b+10) })
	if st := sub.Status(); st.ReplayFailures != 1 {
		t.Fatalf("%+v: want the gap beyond the buffer to fail its replay", st)
	}
	if after, _, _ = r.state(); after == resets {
		t.Fatalf("%+v, %d resets: want the unrepaired gap to reset", st, after)
	}
}
