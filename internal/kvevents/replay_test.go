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
	// Batch 0 until one arrives (a PUB socket drops what it sends before the subscription).
	eventually(t, "the first batch", func() bool { send(0); return sub.Status().Next > 0 })
	for i := range 6 {
		rs.Keep(uint64(i), payload(i))
	}
	send(1) // after every copy of batch 0: what follows is in order
	eventually(t, "batch 1", func() bool { return sub.Status().Next == 2 })
	resets, _, before := r.state()
	send(5) // 2 to 4 lost
	eventually(t, "batch 5", func() bool { return sub.Status().Next == 6 })
	st := sub.Status()
	after, _, n := r.state()
	if st.Replays != 1 || after != resets || n != before+4 {
		t.Fatalf("%+v: %d resets (was %d), %d hashes (was %d): want the gap replayed", st, after, resets, n, before)
	}
	send(9) // 6 to 8 lost; the server keeps 2 to 5 only
	eventually(t, "batch 9", func() bool { return sub.Status().Next == 10 })
	if st := sub.Status(); st.ReplayFailures != 1 {
		t.Fatalf("%+v: want the gap beyond the buffer to fail its replay", st)
	}
	if after, _, _ = r.state(); after == resets {
		t.Fatalf("%+v, %d resets: want the unrepaired gap to reset", st, after)
	}
}
